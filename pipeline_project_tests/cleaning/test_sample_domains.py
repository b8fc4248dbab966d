"""The demo's generated sample feeds every cleaning profile: web English, Chinese, code and a book are each kept."""

from collections import Counter

import pytest

from pipeline_project.cleaning import CleaningConfig, Document, read_object
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project.demo.sample.corpus import generate
from pipeline_project_harness.standins import WholeBatchPipeline


@pytest.mark.parametrize("seed", [0, 3])
def test_the_generated_sample_is_kept_in_all_four_domains(seed):
    cfg = CleaningConfig()
    docs = [d for f in generate(seed=seed, docs_per_language=6) for d in read_object(f.key, f.data, cfg)]
    docs = [d for d in docs if isinstance(d, Document)]
    result = WholeBatchPipeline(cfg).run(docs, "t", MemoryDedupIndex())
    kept = Counter(d.meta.get("domain") for d in result.kept)
    assert set(kept) == {"en_web", "zh_web", "code", "books"}, kept
    (book,) = [d for d in result.kept if d.meta.get("domain") == "books"]
    assert "PROJECT GUTENBERG" not in book.text  # the header and footer are cut
    assert all(d.source.endswith("code/modules.jsonl") for d in result.kept if d.meta.get("domain") == "code")
