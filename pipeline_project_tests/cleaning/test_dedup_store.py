"""The PostgreSQL dedup index on the stack's real server: parity with the in-memory index, concurrent
batches (first writer wins), the database down, a restart, and the migration from the S3 index file."""

from __future__ import annotations

import threading
import uuid

import pytest

from pipeline_project.cleaning import CleaningConfig, Document
from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex
from pipeline_project.cleaning.dedup.migrate import import_local_index
from pipeline_project.cleaning.dedup.postgres import DedupStoreUnavailableError, PostgresDedupIndex
from pipeline_project_harness.standins import WholeBatchPipeline
from pipeline_project_tests.cleaning.test_dedup import _words

pytestmark = pytest.mark.stack


def _edit(text: str, start: int, count: int, fresh: int) -> str:
    """The text with `count` words from `start` replaced by unseen ones: a near duplicate (Jaccard ~0.95)."""
    words = text.split()
    return " ".join(words[:start] + _words(count, fresh) + words[start + count :])


def _docs(prefix: str, texts: list[str]) -> list[Document]:
    return [Document(id=f"{prefix}-{i}", text=t, source=prefix) for i, t in enumerate(texts)]


def _corpus(seed: int, n: int = 12) -> list[str]:
    return [" ".join(_words(400, start=(seed * 1000 + i) * 400)) for i in range(n)]  # disjoint vocabularies


CONFIG = CleaningConfig.model_validate(
    {
        "language": {"enabled": False},
        "gopher_quality": {"enabled": False},
        "gopher_repetition": {"enabled": False},
        "c4": {"enabled": False},
        "fineweb": {"enabled": False},
    }
)


def _kept_ids(result) -> list[str]:
    return sorted(d.id for d in result.kept)


def test_same_decisions_as_the_in_memory_index_across_batches(pg_url):
    base = _corpus(1)
    second = [base[0], _edit(base[1], start=30, count=8, fresh=90_000), *_corpus(2, 4)]
    memory, postgres = MemoryDedupIndex(), PostgresDedupIndex(pg_url)
    pipeline = WholeBatchPipeline(CONFIG)
    kept = 0
    for batch, texts in (("b1", base), ("b2", second)):
        a = pipeline.run(_docs(batch, texts), batch, memory)
        kept += a.counts["kept"]
        b = pipeline.run(_docs(batch, texts), batch, postgres)
        assert _kept_ids(a) == _kept_ids(b)
        assert sorted((d.id, d.reason) for d in a.dropped) == sorted((d.id, d.reason) for d in b.dropped)
    b2 = pipeline.run(_docs("b2", second), "b2", postgres)  # a re-run of a batch does not find itself
    assert {d.id for d in b2.dropped} == {"b2-0", "b2-1"}
    assert len(postgres) == kept == len(memory)
    postgres.close()


def test_concurrent_batches_with_overlapping_content_admit_each_document_once(pg_url):
    shared = _corpus(3, 10)
    batches = {f"c{k}": shared + _corpus(10 + k, 3) for k in range(4)}
    results: dict[str, object] = {}
    barrier = threading.Barrier(len(batches))

    def clean(batch_id: str) -> None:
        index = PostgresDedupIndex(pg_url)
        pipeline = WholeBatchPipeline(CONFIG)
        result = pipeline.run(_docs(batch_id, batches[batch_id]), batch_id, index, commit=False)
        barrier.wait()  # every batch has looked up an index that holds none of the others
        results[batch_id] = pipeline.commit(result, index)
        index.close()

    threads = [threading.Thread(target=clean, args=(b,)) for b in batches]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == len(batches)
    kept_texts = [d.text for r in results.values() for d in r.kept]
    assert len(kept_texts) == len(set(kept_texts)), "a shared document was admitted twice"
    for text in shared:
        assert kept_texts.count(text) == 1, "a shared document was lost or duplicated"
    for batch_id, r in results.items():
        c = r.counts
        assert c["in"] == len(batches[batch_id]) == c["kept"] + c["dropped"] + c["quarantined"]
    late = [d for r in results.values() for d in r.dropped if d.step == "index_commit"]
    assert len(late) == 3 * len(shared)
    assert all(d.reason.startswith("exact_duplicate_of:c") for d in late)


def test_database_down_is_one_clear_error():
    index = PostgresDedupIndex("postgresql://pipeline:x@127.0.0.1:1/pipeline", connect_timeout_s=2)
    with pytest.raises(DedupStoreUnavailableError, match="dedup index database unreachable"):
        WholeBatchPipeline(CONFIG).run(_docs("d", _corpus(4, 2)), "d", index)


@pytest.mark.serial  # restarts the shared PostgreSQL
def test_the_index_persists_across_a_server_restart(pg_url, local_stack):
    texts = _corpus(5, 3)
    index = PostgresDedupIndex(pg_url)
    WholeBatchPipeline(CONFIG).run(_docs("p1", texts), "p1", index)
    index.close()
    service = local_stack.services["postgres"]
    service.stop()
    local_stack.up(["postgres"], timeout=60)
    again = WholeBatchPipeline(CONFIG).run(_docs("p2", texts), "p2", PostgresDedupIndex(pg_url))
    assert again.counts["kept"] == 0 and all(d.reason.startswith("exact_duplicate_of:p1/") for d in again.dropped)


def test_migration_from_the_s3_index_file_keeps_every_decision(pg_url):
    texts = _corpus(6, 6)
    memory = MemoryDedupIndex()
    WholeBatchPipeline(CONFIG).run(_docs("m1", texts), "m1", memory)
    restored = MemoryDedupIndex.from_bytes(memory.to_bytes())  # what `index.bin` in S3 holds
    index = PostgresDedupIndex(pg_url)
    assert import_local_index(index, restored) == len(texts)
    probe = [texts[0], _edit(texts[1], start=50, count=6, fresh=70_000), *_corpus(7, 1)]
    a = WholeBatchPipeline(CONFIG).run(_docs("m2", probe), "m2", MemoryDedupIndex.from_bytes(memory.to_bytes()))
    b = WholeBatchPipeline(CONFIG).run(_docs("m2", probe), "m2", index)
    assert [(d.id, d.reason) for d in a.dropped] == [(d.id, d.reason) for d in b.dropped]
    assert len(b.dropped) == 2


def test_the_cli_migrates_the_s3_index_file(pg_url, stack, monkeypatch):
    from typer.testing import CliRunner

    from pipeline_project.cli.app import app

    texts = _corpus(8, 4)
    memory = MemoryDedupIndex()
    WholeBatchPipeline(CONFIG).run(_docs("cli1", texts), "cli1", memory)
    key = f"it-{uuid.uuid4().hex[:8]}/dedup/index.bin"
    stack.s3_client().put_object(Bucket=stack.bucket, Key=key, Body=memory.to_bytes())
    monkeypatch.setenv("PIPELINE_S3_ENDPOINT", stack.s3_endpoint)
    monkeypatch.setenv("PIPELINE_POSTGRES_URL", pg_url)
    result = CliRunner().invoke(app, ["dedup-import", "--key", key, "--schema", "migrated"])
    assert result.exit_code == 0, result.output
    assert "imported 4 documents of 1 batches" in result.output
    index = PostgresDedupIndex(pg_url, schema="migrated")
    again = WholeBatchPipeline(CONFIG).run(_docs("cli2", texts[:1]), "cli2", index)
    assert [d.reason for d in again.dropped] == ["exact_duplicate_of:cli1/cli1-0"]


def test_the_import_waits_for_a_run_that_holds_the_batch(pg_url, stack, monkeypatch):
    """`dedup-import` writes a batch's rows under the batch lock, as every other writer of published state does."""
    import time

    from typer.testing import CliRunner

    from pipeline_project.cli.app import app
    from pipeline_project.common.batch_lock import batch_lock

    memory = MemoryDedupIndex()
    WholeBatchPipeline(CONFIG).run(_docs("held1", _corpus(9, 3)), "held1", memory)
    key = f"it-{uuid.uuid4().hex[:8]}/dedup/index.bin"
    stack.s3_client().put_object(Bucket=stack.bucket, Key=key, Body=memory.to_bytes())
    monkeypatch.setenv("PIPELINE_S3_ENDPOINT", stack.s3_endpoint)
    monkeypatch.setenv("PIPELINE_POSTGRES_URL", pg_url)
    held, released = threading.Event(), {}

    def run_holding_the_batch():
        with batch_lock(pg_url, "held1"):
            held.set()
            time.sleep(3.0)
            released["at"] = time.monotonic()

    holder = threading.Thread(target=run_holding_the_batch)
    holder.start()
    assert held.wait(30)
    result = CliRunner().invoke(app, ["dedup-import", "--key", key, "--schema", "held"])
    finished = time.monotonic()
    holder.join()
    assert result.exit_code == 0, result.output
    assert finished > released["at"]  # it waited for the holder


def test_a_batch_reads_only_what_it_matches_not_the_history(pg_url):
    pipeline = WholeBatchPipeline(CONFIG)

    def clean(batch_id: str, texts: list[str]):
        index = PostgresDedupIndex(pg_url)
        pipeline.run(_docs(batch_id, texts), batch_id, index)
        traffic = index.traffic
        index.close()
        return traffic

    first = clean("h1", _corpus(20, 12))
    assert first.keys_queried > 0 and first.rows_read == 0 and first.bytes_read == 0
    assert first.rows_written >= 12 and first.bytes_written > 0
    for k in range(2, 5):
        clean(f"h{k}", _corpus(20 + k, 12))  # history grows to 48 documents
    fresh = clean("h9", _corpus(40, 12))
    assert fresh.rows_read == 0 and fresh.bytes_read == 0, "a batch with no duplicates read rows of the history"
    assert fresh.keys_queried == first.keys_queried
    repeat = clean("h10", _corpus(20, 2) + _corpus(41, 10))
    assert repeat.rows_read >= 2 and repeat.bytes_read > 0, "the two duplicates' owners were not read"
    assert repeat.keys_queried <= first.keys_queried  # exact duplicates skip the band lookup
