"""Fill-in-the-middle at tokenize time (`streaming.fim`): rate, reassembly, determinism, domains, the packer hook."""

import numpy as np
import pytest

from pipeline_project.defs.resources.layout import TopicConfig
from pipeline_project.streaming.produce.fim import FimApplier, FimConfig, FimPolicy, FimSentinels
from pipeline_project.streaming.produce.packing import DomainPackers
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project.streaming.produce.tokenize import StageTimer, timed_blocks
from pipeline_project.streaming.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def _code(n: int) -> list[str]:
    return [f"def f{i}(x):\n    return x * {i} + len('{i % 97}')\n" for i in range(n)]


def _applier(tok, policy: FimPolicy) -> FimApplier:
    return FimApplier(policy, FimSentinels.of(tok))


def _parts(ids: np.ndarray, s: FimSentinels, mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prefix, middle, suffix) of a FIM-arranged sequence."""
    hole = int(np.flatnonzero(ids == s.hole[0])[0])
    end = int(np.flatnonzero(ids == s.end[0])[0])
    assert ids[0] == s.begin[0]
    if mode == "psm":
        return ids[1:hole], ids[end + 1 :], ids[hole + 1 : end]
    raise AssertionError("psm only")


def test_the_shipped_tokenizer_has_the_fim_tokens(tok):
    s = FimSentinels.of(tok)
    assert (int(s.begin[0]), int(s.hole[0]), int(s.end[0])) == (128801, 128800, 128802)


def test_realized_rate_is_within_one_percent_over_ten_thousand_documents(tok):
    fim = _applier(tok, FimPolicy.deepseek())
    docs = _code(10_000)
    fim.encode(docs, ["code"] * len(docs), tok.encode_batch)
    assert abs(fim.counts["code"] / len(docs) - 0.1) <= 0.01, fim.counts


def test_token_split_reassembles_the_exact_token_sequence(tok):
    policy = FimPolicy(domains={"code": FimConfig(rate=1.0, split="token")})
    fim = _applier(tok, policy)
    docs = _code(200)
    out = fim.encode(docs, ["code"] * len(docs), tok.encode_batch)
    plain = tok.encode_batch(docs)
    for ids, whole in zip(out, plain, strict=True):
        prefix, middle, suffix = _parts(ids, fim.sentinels, "psm")
        np.testing.assert_array_equal(np.concatenate([prefix, middle, suffix]), whole)
        assert len(ids) == len(whole) + 3


def test_char_split_parts_are_tokenized_alone_and_decode_to_the_document(tok):
    fim = _applier(tok, FimPolicy(domains={"code": FimConfig(rate=1.0)}))
    docs = _code(200)
    out = fim.encode(docs, ["code"] * len(docs), tok.encode_batch)
    split_inside_a_token = 0
    for ids, text in zip(out, docs, strict=True):
        prefix, middle, suffix = _parts(ids, fim.sentinels, "psm")
        assert tok.decode(prefix) + tok.decode(middle) + tok.decode(suffix) == text
        split_inside_a_token += not np.array_equal(
            np.concatenate([prefix, middle, suffix]), tok.encode_batch([text])[0]
        )
    assert split_inside_a_token > 0  # the character-level cut really differs from a token-level one


def test_spm_puts_the_suffix_first(tok):
    fim = _applier(tok, FimPolicy(domains={"code": FimConfig(rate=1.0, mode="spm", split="token")}))
    (ids,) = fim.encode(["def g(a, b):\n    return a - b\n"], ["code"], tok.encode_batch)
    s = fim.sentinels
    assert ids[0] == s.begin[0] and ids[1] == s.hole[0]
    end = int(np.flatnonzero(ids == s.end[0])[0])
    suffix, prefix_middle = ids[2:end], ids[end + 1 :]
    whole = tok.encode_batch(["def g(a, b):\n    return a - b\n"])[0]
    np.testing.assert_array_equal(np.concatenate([prefix_middle[: len(whole) - len(suffix)], suffix]), whole)


def test_deterministic_across_runs_and_seed_dependent(tok):
    docs = _code(2000)
    runs = [
        _applier(tok, FimPolicy.deepseek(seed=7)).encode(docs, ["code"] * len(docs), tok.encode_batch) for _ in range(2)
    ]
    assert all(np.array_equal(a, b) for a, b in zip(*runs, strict=True))
    other = _applier(tok, FimPolicy.deepseek(seed=8)).encode(docs, ["code"] * len(docs), tok.encode_batch)
    assert not all(np.array_equal(a, b) for a, b in zip(runs[0], other, strict=True))


def test_off_for_non_code_domains_and_by_default(tok):
    docs = _code(500)
    plain = tok.encode_batch(docs)
    for policy, domain in ((FimPolicy.deepseek(), "en_web"), (FimPolicy.deepseek(), None), (FimPolicy(), "code")):
        fim = _applier(tok, policy)
        out = fim.encode(docs, [domain] * len(docs), tok.encode_batch)
        assert all(np.array_equal(a, b) for a, b in zip(out, plain, strict=True)) and not fim.counts


def test_fingerprint_is_empty_when_off_and_changes_with_the_rate():
    assert FimPolicy().fingerprint() == "" == FimPolicy(domains={"code": FimConfig(rate=0.0)}).fingerprint()
    a, b = FimPolicy.deepseek().fingerprint(), FimPolicy(domains={"code": FimConfig(rate=0.2)}).fingerprint()
    assert a and b and a != b


def test_the_tokenize_and_pack_path_applies_fim_and_counts_it_per_domain(tok):
    docs = [("code", t) for t in _code(3000)] + [("en_web", f"plain text number {i}.") for i in range(500)]
    config = ProducerConfig(fim=FimPolicy.deepseek(), text_batch_docs=256)

    def run():
        packer = DomainPackers(64, tok.eos_id)
        blocks = list(timed_blocks(iter(docs), tok, packer, config, StageTimer()))
        return blocks, packer

    (first, packer), (second, _) = run(), run()
    assert all(a[0] == b[0] and np.array_equal(a[1], b[1]) for a, b in zip(first, second, strict=True))
    per = packer.per_domain()
    assert 250 <= per["code"]["fim_docs"] <= 350 and per["en_web"]["fim_docs"] == 0
    assert packer.stats()["fim_docs"] == per["code"]["fim_docs"]
    hole = FimSentinels.of(tok).hole[0]
    assert sum(int((b == hole).sum()) for d, b in first if d == "code") == per["code"]["fim_docs"]
    assert not any((b == hole).any() for d, b in first if d == "en_web")


def test_without_fim_the_packer_reports_no_fim_counts(tok):
    packer = DomainPackers(64, tok.eos_id)
    list(timed_blocks(iter([("code", "x = 1\n")]), tok, packer, ProducerConfig(), StageTimer()))
    assert "fim_docs" not in packer.stats() and "fim_docs" not in packer.per_domain()["code"]


@pytest.mark.stack
def test_a_fim_batch_resumes_exactly_and_another_fim_config_is_refused(stack, tok):
    from pipeline_project.streaming.errors import LedgerConflictError
    from pipeline_project.streaming.kafka.client import KafkaSettings
    from pipeline_project.streaming.kafka.topics import ensure_topic
    from pipeline_project.streaming.produce.tokenize import tokenize_and_produce
    from pipeline_project_tests.streaming.kafka_helpers import consume_all, unique_topic

    s = KafkaSettings.from_settings(stack)
    topic = unique_topic("fim")
    ensure_topic(s.make_admin(), topic)
    docs = [("code", t) for t in _code(1000)] + [("en_web", f"plain text number {i}.") for i in range(100)]
    config = ProducerConfig(
        fim=FimPolicy.deepseek(), text_batch_docs=100, max_message_bytes=64 * 4 * 5, transaction_max_bytes=64 * 4 * 10
    )
    kw = dict(tokenizer=tok, seq_len=64, source="b", ledger_key="fim-1", content_hash="c1")

    def dies_after(n):
        yield from docs[:n]
        raise OSError("S3 read failed")

    with pytest.raises(OSError, match="S3 read failed"):
        tokenize_and_produce(s, ProduceRequest(topic=topic, config=config, **kw), dies_after(700))
    committed = len(consume_all(s, topic))
    assert committed > 0  # an interrupted batch: its retry must skip the committed prefix, checked by hash
    report = tokenize_and_produce(s, ProduceRequest(topic=topic, config=config, **kw), iter(docs))
    assert report.resumed_blocks > 0 and report.packing_hash == FimPolicy.deepseek().fingerprint()

    packer = DomainPackers(64, tok.eos_id)
    expected = list(timed_blocks(iter(docs), tok, packer, config, StageTimer()))
    got = np.concatenate([np.frombuffer(m.value(), dtype="<u4").reshape(-1, 64) for m in consume_all(s, topic)])
    assert sorted(map(bytes, got)) == sorted(map(bytes, np.concatenate([b for _d, b in expected])))
    assert report.domains["code"]["fim_docs"] == packer.per_domain()["code"]["fim_docs"] > 0
    assert report.domains["en_web"]["fim_docs"] == 0

    assert tokenize_and_produce(s, ProduceRequest(topic=topic, config=config, **kw), iter(docs)).reused
    other = config.model_copy(update={"fim": FimPolicy(domains={"code": FimConfig(rate=0.2)})})
    for changed in (other, config.model_copy(update={"fim": FimPolicy()})):
        with pytest.raises(LedgerConflictError, match="packing fim:"):
            tokenize_and_produce(s, ProduceRequest(topic=topic, config=changed, **kw), iter(docs))


def test_the_layout_resource_turns_fim_on_for_code_only():
    from pipeline_project.defs.resources.layout import PipelineLayout

    assert not PipelineLayout().topic_spec.fim.active
    assert PipelineLayout(topic=TopicConfig(fim_code_rate=0.1)).topic_spec.fim == FimPolicy.deepseek()
    spm = PipelineLayout(topic=TopicConfig(fim_code_rate=0.5, fim_mode="spm", fim_seed=3)).topic_spec.fim
    assert spm.domains == {"code": FimConfig(rate=0.5, mode="spm")} and spm.seed == 3
