import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_project.streaming.kafka.format import (
    FORMAT_VERSION,
    PAD_TOKEN,
    PLAIN_FORMAT_VERSION,
    MalformedMessageError,
    decode_blocks,
    decode_message,
    encode_message,
    max_blocks_per_message,
    read_header,
)

WHERE = dict(topic="blocks-t", partition=5, offset=1234)


def _encode(blocks, **kw):
    args = dict(tokenizer_name="deepseek-v3", tokenizer_hash="abc123", source="shard-0007")
    args.update(kw)
    return encode_message(blocks, **args)


def _assert_names_location(exc: MalformedMessageError, problem_fragment: str):
    text = str(exc)
    assert "blocks-t" in text and "[5]" in text and "1234" in text
    assert problem_fragment in text
    assert (exc.topic, exc.partition, exc.offset) == ("blocks-t", 5, 1234)


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(1, 5),
    seq_len=st.integers(1, 64),
    seed=st.integers(0, 2**32 - 1),
)
def test_round_trip_preserves_every_token(n, seq_len, seed):
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 2**32, size=(n, seq_len), dtype=np.uint64).astype(np.uint32)
    value, headers = _encode(blocks)
    out = decode_message(value, headers, expected_seq_len=seq_len, expected_tokenizer_hash="abc123", **WHERE)
    assert out.dtype == np.dtype("<u4")
    assert out.shape == (n, seq_len)
    np.testing.assert_array_equal(out, blocks)


def test_value_is_little_endian_uint32_and_headers_carry_metadata():
    blocks = np.array([[1, 256, 65536, 2**32 - 2]], dtype=np.uint32)
    value, headers = _encode(blocks)
    assert value == b"\x01\x00\x00\x00" + b"\x00\x01\x00\x00" + b"\x00\x00\x01\x00" + b"\xfe\xff\xff\xff"
    h = dict(headers)
    assert h == {
        "fmt": str(PLAIN_FORMAT_VERSION).encode(),  # no padding: byte for byte the version-1 format
        "tok": b"deepseek-v3",
        "tok_hash": b"abc123",
        "seq_len": b"4",
        "blocks": b"1",
        "src": b"shard-0007",
    }
    parsed = read_header(headers, **WHERE)
    assert (parsed.seq_len, parsed.blocks, parsed.source, parsed.tokenizer_name) == (4, 1, "shard-0007", "deepseek-v3")


def test_big_endian_input_is_written_little_endian():
    blocks = np.array([[1, 2]], dtype=">u4")
    value, _ = _encode(blocks)
    assert value == b"\x01\x00\x00\x00\x02\x00\x00\x00"


def test_decode_is_zero_copy_view_of_value():
    value, headers = _encode(np.arange(8, dtype=np.uint32).reshape(2, 4))
    out = decode_message(value, headers, **WHERE)
    assert not out.flags.owndata
    assert not out.flags.writeable


def test_wrong_length_raises():
    value, headers = _encode(np.zeros((2, 4), dtype=np.uint32))
    with pytest.raises(MalformedMessageError) as ei:
        decode_message(value[:-4], headers, **WHERE)
    _assert_names_location(ei.value, "expected 32")


def test_wrong_tokenizer_hash_raises():
    value, headers = _encode(np.zeros((1, 4), dtype=np.uint32))
    with pytest.raises(MalformedMessageError) as ei:
        decode_message(value, headers, expected_tokenizer_hash="ffff", **WHERE)
    _assert_names_location(ei.value, "tokenizer hash abc123")


def test_wrong_seq_len_raises():
    value, headers = _encode(np.zeros((1, 4), dtype=np.uint32))
    with pytest.raises(MalformedMessageError) as ei:
        decode_message(value, headers, expected_seq_len=8, **WHERE)
    _assert_names_location(ei.value, "seq_len 4 != expected 8")


def test_unknown_format_version_raises():
    value, headers = _encode(np.zeros((1, 4), dtype=np.uint32))
    headers = [(k, b"3" if k == "fmt" else v) for k, v in headers]
    with pytest.raises(MalformedMessageError) as ei:
        decode_message(value, headers, **WHERE)
    _assert_names_location(ei.value, "unknown format version 3")


def test_padded_message_is_version_2_with_its_pad_count():
    blocks = np.array([[5, 6, 7, 8], [9, PAD_TOKEN, PAD_TOKEN, PAD_TOKEN]], dtype=np.uint32)
    value, headers = _encode(blocks)
    h = dict(headers)
    assert (h["fmt"], h["pad"]) == (str(FORMAT_VERSION).encode(), b"3")
    header, out = decode_blocks(value, headers, expected_seq_len=4, **WHERE)
    assert header.pad_tokens == 3 and header.format_version == FORMAT_VERSION
    np.testing.assert_array_equal(out, blocks)
    # an explicit count wins over counting; a count that cannot fit is refused
    assert dict(_encode(blocks, pad_tokens=3)[1])["pad"] == b"3"
    with pytest.raises(ValueError, match="pad tokens"):
        _encode(blocks, pad_tokens=8)


@pytest.mark.parametrize(
    ("fmt", "pad", "problem"), [(b"1", b"2", "cannot hold padding"), (b"2", b"99", "outside"), (b"2", b"x", "unparse")]
)
def test_inconsistent_pad_header_raises(fmt, pad, problem):
    value, headers = _encode(np.zeros((1, 4), dtype=np.uint32))
    headers = [(k, fmt if k == "fmt" else v) for k, v in headers] + [("pad", pad)]
    with pytest.raises(MalformedMessageError) as ei:
        decode_message(value, headers, **WHERE)
    _assert_names_location(ei.value, problem)


@pytest.mark.parametrize("drop", ["fmt", "tok", "tok_hash", "seq_len", "blocks", "src"])
def test_missing_header_raises(drop):
    value, headers = _encode(np.zeros((1, 4), dtype=np.uint32))
    headers = [(k, v) for k, v in headers if k != drop]
    with pytest.raises(MalformedMessageError) as ei:
        decode_message(value, headers, **WHERE)
    _assert_names_location(ei.value, f"missing headers ['{drop}']")


def test_no_headers_at_all_raises():
    with pytest.raises(MalformedMessageError) as ei:
        decode_message(b"\x00" * 16, None, **WHERE)
    _assert_names_location(ei.value, "missing headers")


def test_unparseable_header_and_tombstone_raise():
    value, headers = _encode(np.zeros((1, 4), dtype=np.uint32))
    garbled = [(k, b"four" if k == "seq_len" else v) for k, v in headers]
    with pytest.raises(MalformedMessageError) as ei:
        decode_message(value, garbled, **WHERE)
    _assert_names_location(ei.value, "unparseable header")
    with pytest.raises(MalformedMessageError) as ei:
        decode_message(None, headers, **WHERE)
    _assert_names_location(ei.value, "tombstone")


def test_encode_rejects_wrong_dtype_and_shape():
    with pytest.raises(ValueError, match="uint32"):
        _encode(np.zeros((1, 4), dtype=np.int64))
    with pytest.raises(ValueError, match="2-D"):
        _encode(np.zeros(4, dtype=np.uint32))
    with pytest.raises(ValueError, match="non-empty"):
        _encode(np.zeros((0, 4), dtype=np.uint32))


def test_max_blocks_per_message():
    assert max_blocks_per_message(4096) == 8  # 8 * 16384 = 128 KiB, the default message size
    assert max_blocks_per_message(4096, 900_000) == 54  # 54 * 16384 = 884,736 <= 900,000
    assert max_blocks_per_message(2048, max_bytes=8192) == 1
    assert max_blocks_per_message(1024, max_bytes=8192) == 2
    with pytest.raises(ValueError, match="over the"):
        max_blocks_per_message(300_000)
    with pytest.raises(ValueError):
        max_blocks_per_message(0)
