"""The domain travels with the blocks: packed per domain, one domain per message, a `domain` header, counted."""

import numpy as np

from pipeline_project.streaming.kafka.format import PAD_TOKEN, decode_blocks, encode_message, read_header
from pipeline_project.streaming.produce.packing import BlockPacker, DomainPackers
from pipeline_project.streaming.produce.staging import MessageEncoder, StreamHasher, rechunk, skip_blocks, stage_chunks
from pipeline_project.streaming.produce.transactions import BatchTotals

EOS = 7


def _docs(*lengths, start=100):
    return [np.arange(start + 10 * i, start + 10 * i + n, dtype=np.uint32) for i, n in enumerate(lengths)]


def test_domain_header_round_trips_and_is_optional():
    blocks = np.arange(8, dtype=np.uint32).reshape(2, 4)
    value, headers = encode_message(blocks, tokenizer_name="t", tokenizer_hash="h", source="b1", domain="zh_web")
    header, back = decode_blocks(value, headers, topic="x", partition=0, offset=0)
    assert header.domain == "zh_web" and back.tolist() == blocks.tolist()
    value, headers = encode_message(blocks, tokenizer_name="t", tokenizer_hash="h", source="b1")
    assert read_header(headers, topic="x", partition=0, offset=0).domain is None
    assert all(k != "domain" for k, _ in headers)  # unlabelled messages are byte for byte as before


def test_domain_packers_never_mix_domains_and_add_up():
    packers = DomainPackers(seq_len=4, eos_id=EOS)
    docs = _docs(3, 5, 2, 6)
    out = packers.add(docs, ["en_web", "code", "en_web", "code"])
    out += packers.flush()
    alone = {}
    for domain in ("en_web", "code"):
        p = BlockPacker(4, EOS)
        mine = [d for d, dom in zip(docs, ["en_web", "code", "en_web", "code"], strict=True) if dom == domain]
        alone[domain] = np.concatenate([p.add(mine), p.flush()])
    for domain in ("en_web", "code"):
        got = np.concatenate([b for d, b in out if d == domain])
        np.testing.assert_array_equal(got, alone[domain])  # each domain packs as if alone
    per = packers.per_domain()
    assert per["en_web"]["docs"] == 2 and per["code"]["docs"] == 2
    assert packers.stats()["blocks"] == sum(len(b) for _, b in out)
    assert packers.tail_tokens == per["en_web"]["tail_tokens"] + per["code"]["tail_tokens"]


def test_untagged_stream_is_cut_exactly_as_before():
    arrays = [np.arange(i * 12, (i + 1) * 12, dtype=np.uint32).reshape(4, 3) for i in range(3)]
    out = list(rechunk(arrays, per_message=5))
    assert all(isinstance(m, np.ndarray) for m in out) and [len(m) for m in out] == [5, 5, 2]


def test_rechunk_per_domain_emits_full_messages_of_one_domain_then_the_short_tails():
    def tag(domain, start, n):
        return domain, np.full((n, 2), start, dtype=np.uint32)

    stream = [tag("a", 1, 3), tag("b", 2, 2), tag("a", 3, 2), tag("b", 4, 1), tag("a", 5, 1)]
    out = list(rechunk(stream, per_message=4))
    assert [(d, len(m)) for d, m in out] == [("a", 4), ("a", 2), ("b", 3)]  # a's full one first, tails by first use
    assert out[0][1][:, 0].tolist() == [1, 1, 1, 3]


def test_encoded_chunks_carry_the_domain_and_totals_count_it():
    stream = [("code", np.ones((3, 2), dtype=np.uint32)), ("books", np.full((2, 2), PAD_TOKEN, dtype=np.uint32))]
    stream[1][1][:, 0] = 5  # half padding
    encoder = MessageEncoder(tokenizer_name="t", tokenizer_hash="h", source="b", seq_len=2, hasher=StreamHasher())
    chunks = list(stage_chunks(rechunk(stream, per_message=2), 10, encoder))
    assert len(chunks) == 1 and chunks[0].last
    headers = [dict(m.headers) for m in chunks[0].messages]
    assert [h["domain"] for h in headers] == [b"code", b"books", b"code"]  # full messages first, then tails
    totals = BatchTotals().plus(chunks[0], {0: (0, 2)})
    assert totals.domains == {
        "books": {"messages": 1, "blocks": 2, "pad_tokens": 2},
        "code": {"messages": 2, "blocks": 3, "pad_tokens": 0},
    }


def test_a_retry_skips_whole_messages_of_the_tagged_stream_and_keeps_the_cut():
    def stream():
        for i in range(6):
            yield ("a" if i % 3 else "b"), np.full((2, 2), i, dtype=np.uint32)

    full = list(rechunk(stream(), per_message=3))
    committed = full[:2]
    h = StreamHasher()
    for _, m in committed:
        h.update(m)
    n = sum(len(m) for _, m in committed)
    rest = list(skip_blocks(rechunk(stream(), per_message=3), n, expected_hash=h.hexdigest(), hasher=StreamHasher(),
                            where="test"))  # fmt: skip
    assert [(d, m.tolist()) for d, m in rest] == [(d, m.tolist()) for d, m in full[2:]]
