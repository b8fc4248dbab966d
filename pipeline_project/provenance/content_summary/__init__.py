"""The public training-content summary of a checkpoint (AI Act Art. 53(1)(d), the Commission's template of July
2025), generated from the pipeline's own records, as JSON and Markdown.

    inputs = gather(stores, lineage, step)        # gather.py: the step logs, ledger, manifests, attributes
    summary = build_summary(inputs)               # build.py: pure, the template's sections
    markdown = render_markdown(summary)           # render.py
    uris = write_summary(s3, bucket, root, lineage, step, summary, markdown)

`summarize` does the four. Which batches a checkpoint trained on comes from its step logs (`trained.py`). Plain
Python: the `training_content_summary` asset and `pipeline-project summary` both call `summarize`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pipeline_project.provenance.content_summary.build import adds_up, build_summary
from pipeline_project.provenance.content_summary.gather import Stores, gather
from pipeline_project.provenance.content_summary.model import TBC, BatchInput, DocKey, Provider, SummaryInputs
from pipeline_project.provenance.content_summary.render import render_markdown

SUMMARY_DIR = "content-summary"

__all__ = [
    "TBC",
    "BatchInput",
    "DocKey",
    "Provider",
    "Stores",
    "Summary",
    "SummaryInputs",
    "adds_up",
    "build_summary",
    "gather",
    "render_markdown",
    "summarize",
    "summary_keys",
    "write_summary",
]


@dataclass(frozen=True)
class Summary:
    document: dict[str, Any]
    markdown: str
    json_uri: str
    markdown_uri: str

    @property
    def adds_up(self) -> bool:
        return adds_up(self.document)


def summary_keys(root: str, lineage: str, step: int) -> tuple[str, str]:
    """(JSON key, Markdown key) beside the lineage's step folders: `<root>/<lineage>/content-summary/step-<n>.*`."""
    base = f"{root.strip('/')}/{lineage.strip('/')}/{SUMMARY_DIR}/step-{step}"
    return f"{base}.json", f"{base}.md"


def write_summary(s3: Any, bucket: str, root: str, lineage: str, document: dict, markdown: str) -> tuple[str, str]:
    """Store both documents (overwritten whole: a summary is a function of the records it was built from)."""
    json_key, md_key = summary_keys(root, lineage, document["scope"]["checkpoint_step"])
    body = json.dumps(document, indent=1, sort_keys=True).encode()
    s3.put_object(Bucket=bucket, Key=json_key, Body=body, ContentType="application/json")
    s3.put_object(Bucket=bucket, Key=md_key, Body=markdown.encode(), ContentType="text/markdown")
    return f"s3://{bucket}/{json_key}", f"s3://{bucket}/{md_key}"


def summarize(
    stores: Stores,
    lineage: str,
    step: int | None = None,
    *,
    provider: Provider | None = None,
    fim: dict[str, Any] | None = None,
    write: bool = True,
) -> Summary:
    """Gather, build, render and (with `write`) store the summary of `lineage` at `step` (default: its newest)."""
    document = build_summary(gather(stores, lineage, step, provider=provider, fim=fim))
    markdown = render_markdown(document)
    uris = ("", "")
    if write:
        uris = write_summary(stores.s3, stores.bucket, stores.checkpoints_root, lineage, document, markdown)
    return Summary(document, markdown, *uris)
