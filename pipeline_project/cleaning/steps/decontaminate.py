"""Drop documents that share a long word n-gram with an evaluation set (`decontam_index`).

The reason is `decontaminated:<benchmark>`. The step judges one document at a time (it runs with the filters,
in the pool's workers); each process builds the benchmark index once per config.
"""

from __future__ import annotations

from pipeline_project.cleaning.decontam.index import DecontaminationConfig, load_index
from pipeline_project.cleaning.steps.base import DocFilter


class Decontaminate(DocFilter):
    name = "decontaminate"

    def __init__(self, config: DecontaminationConfig):
        self.index = load_index(config)

    def check(self, doc) -> str | None:
        benchmark = self.index.match(doc.text)
        return None if benchmark is None else f"decontaminated:{benchmark}"
