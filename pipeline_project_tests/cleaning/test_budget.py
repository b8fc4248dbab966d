"""Every document has a CPU-time budget: one that takes forever is quarantined `processing_timeout`, in process
and in the pool (where the worker is replaced), and the rest of its chunk is cleaned as it would be without it."""

from __future__ import annotations

import itertools
import threading

from pipeline_project.cleaning import CleaningConfig, Document
from pipeline_project.cleaning.chain.pool import FilterPool
from pipeline_project.cleaning.chain.profiles import build_chains
from pipeline_project.cleaning.config import LimitsConfig
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project.cleaning.steps.base import DocFilter
from pipeline_project_harness.standins import WholeBatchPipeline
from pipeline_project_tests.cleaning.conftest import prose

CONFIG = CleaningConfig(limits=LimitsConfig(document_cpu_seconds=0.5, document_cpu_seconds_per_mb=0))


class Stall(DocFilter):
    """A stand-in step that never ends on a marked document: in Python (`STALL-PY`, which the budget's timer
    interrupts) or in C code that never checks for signals (`STALL-C`, which only killing the worker stops)."""

    name = "stall"

    def check(self, doc):
        if "STALL-PY" in doc.text:
            while True:
                pass
        if "STALL-C" in doc.text:
            sum(itertools.repeat(1, 10**13))
        return None


def stalling_chains(config: CleaningConfig):
    chains = build_chains(config)
    for steps in chains.values():
        steps.insert(0, Stall())
    return chains


def _docs(stalls: tuple[str, ...]) -> list[Document]:
    docs = [Document(f"d{i}", prose(12, seed=i), "raw/web.jsonl") for i in range(6)]
    docs.append(Document("short", "too short to keep", "raw/web.jsonl"))
    for n, marker in enumerate(stalls):
        docs.insert(2 + 2 * n, Document(f"stall-{marker}", prose(12, seed=50 + n) + " " + marker, "raw/web.jsonl"))
    return docs


def _outcome(result):
    return (
        [d.id for d in result.kept],
        sorted((d.id, d.reason) for d in result.dropped),
        sorted((q.id, q.reason) for q in result.quarantined),
    )


def _check(result, stalls: tuple[str, ...]) -> None:
    """The stalled documents are quarantined; the others are decided as without them; the counts add up."""
    expected = WholeBatchPipeline(CONFIG).run(_docs(()), "t", MemoryDedupIndex())
    kept, dropped, quarantined = _outcome(result)
    assert quarantined == sorted((f"stall-{m}", "processing_timeout") for m in stalls)
    assert (kept, dropped) == _outcome(expected)[:2] and len(kept) == 6 and dropped
    c = result.counts
    assert c["in"] == 7 + len(stalls) == c["kept"] + c["dropped"] + c["quarantined"]
    budget = next(s for s in result.step_stats if s.name == "cpu_budget")
    assert budget.dropped == len(stalls) and budget.reasons["processing_timeout"] == len(stalls)


def test_a_looping_document_is_quarantined_in_process():
    result = WholeBatchPipeline(CONFIG, chains_factory=stalling_chains).run(
        _docs(("STALL-PY",)), "t", MemoryDedupIndex()
    )
    _check(result, ("STALL-PY",))


def test_off_the_main_thread_the_budget_holds_in_a_worker():
    out = {}
    pipeline = WholeBatchPipeline(CONFIG, chains_factory=stalling_chains)
    thread = threading.Thread(target=lambda: out.update(r=pipeline.run(_docs(("STALL-PY",)), "t", MemoryDedupIndex())))
    thread.start()
    thread.join(timeout=300)
    assert not thread.is_alive()
    _check(out["r"], ("STALL-PY",))
    assert pipeline.pool is not None and pipeline.pool.replaced == 1
    pipeline.pool.close()


def test_the_pool_quarantines_stalled_documents_and_replaces_their_workers():
    stalls = ("STALL-PY", "STALL-C")
    with FilterPool(CONFIG, workers=1, chains_factory=stalling_chains) as pool:
        pipeline = WholeBatchPipeline(CONFIG, pool=pool, chains_factory=stalling_chains)
        result = pipeline.run(_docs(stalls), "t", MemoryDedupIndex())
        _check(result, stalls)
        assert pool.replaced == 2  # one exited after its timeout, one was killed inside C code
        # the replaced workers go on cleaning
        again = pipeline.run(_docs(()), "t2", MemoryDedupIndex())
        assert _outcome(again)[0] == _outcome(result)[0] and again.counts["quarantined"] == 0
