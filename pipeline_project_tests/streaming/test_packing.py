import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_project.streaming.kafka.format import PAD_TOKEN
from pipeline_project.streaming.produce.packing import BlockPacker

EOS = 1


def _docs(*lists):
    return [np.asarray(x, dtype=np.uint32) for x in lists]


def test_exact_boundary_fills_one_block_with_trailing_eos():
    p = BlockPacker(seq_len=4, eos_id=EOS)
    out = p.add(_docs([10, 11, 12]))
    assert out.dtype == np.uint32 and out.shape == (1, 4)
    np.testing.assert_array_equal(out, [[10, 11, 12, EOS]])
    assert p.remainder.size == 0


def test_eos_between_documents_and_across_block_boundaries():
    p = BlockPacker(seq_len=4, eos_id=EOS)
    out = p.add(_docs([10, 11], [20, 21, 22], [30]))
    # stream: 10 11 E 20 | 21 22 E 30 | E
    np.testing.assert_array_equal(out, [[10, 11, EOS, 20], [21, 22, EOS, 30]])
    np.testing.assert_array_equal(p.remainder, [EOS])


def test_remainder_carries_into_next_add():
    p = BlockPacker(seq_len=5, eos_id=EOS)
    assert p.add(_docs([10, 11])).shape == (0, 5)
    np.testing.assert_array_equal(p.remainder, [10, 11, EOS])
    out = p.add(_docs([20, 21, 22, 23]))
    np.testing.assert_array_equal(out, [[10, 11, EOS, 20, 21]])
    np.testing.assert_array_equal(p.remainder, [22, 23, EOS])


def test_empty_documents_do_not_double_eos():
    p = BlockPacker(seq_len=3, eos_id=EOS)
    out = p.add(_docs([], [7, 8], []))
    np.testing.assert_array_equal(out, [[7, 8, EOS]])
    assert p.docs == 1


def test_flush_without_pad_drops_tail_and_counts_it():
    p = BlockPacker(seq_len=4, eos_id=EOS)
    p.add(_docs([5, 6, 7, 8, 9]))  # 5 6 7 8 | 9 E
    assert p.flush(pad=False).shape == (0, 4)
    assert p.dropped_tokens == 2 == p.tail_tokens
    assert p.remainder.size == 0
    assert p.stats()["dropped_tail_tokens"] == 2
    assert p.flush(pad=False).shape == (0, 4) and p.dropped_tokens == 2  # idempotent


def test_flush_pads_the_tail_with_the_pad_sentinel_by_default():
    p = BlockPacker(seq_len=4, eos_id=EOS)
    p.add(_docs([5, 6, 7, 8, 9]))
    np.testing.assert_array_equal(p.flush(), [[9, EOS, PAD_TOKEN, PAD_TOKEN]])
    assert (p.padded_tokens, p.tail_tokens, p.dropped_tokens, p.blocks_out) == (2, 2, 0, 2)
    assert p.stats()["tail_tokens"] == 2 and p.stats()["padded_tokens"] == 2


def test_one_short_document_becomes_one_padded_block():
    p = BlockPacker(seq_len=8, eos_id=EOS)
    blocks = list(p.pack_all([_docs([10, 11, 12])]))
    np.testing.assert_array_equal(np.concatenate(blocks), [[10, 11, 12, EOS, *[PAD_TOKEN] * 4]])


def test_large_ids_stay_exact():
    p = BlockPacker(seq_len=2, eos_id=2**32 - 1)
    out = p.add([np.array([129279, 2**31], dtype=np.int64)])
    np.testing.assert_array_equal(out, [[129279, 2**31]])
    np.testing.assert_array_equal(p.remainder, [2**32 - 1])


@settings(max_examples=60, deadline=None)
@given(
    seq_len=st.integers(1, 16),
    batches=st.lists(st.lists(st.lists(st.integers(2, 1000), max_size=20), max_size=6), max_size=6),
)
def test_packing_is_the_eos_joined_stream_cut_into_blocks(seq_len, batches):
    p = BlockPacker(seq_len=seq_len, eos_id=EOS)
    blocks = list(p.pack_all([[np.array(d, dtype=np.uint32) for d in b] for b in batches], pad=False))
    expected = [t for b in batches for d in b if d for t in (*d, EOS)]
    got = np.concatenate([b.ravel() for b in blocks]) if blocks else np.empty(0, np.uint32)
    n_full = len(expected) // seq_len
    np.testing.assert_array_equal(got, expected[: n_full * seq_len])
    assert all(b.shape[1] == seq_len for b in blocks)
    assert p.tokens_in == len(expected)
    assert p.dropped_tokens == len(expected) - n_full * seq_len
    assert p.blocks_out == n_full


@settings(max_examples=60, deadline=None)
@given(
    seq_len=st.integers(1, 16),
    batches=st.lists(st.lists(st.lists(st.integers(2, 1000), max_size=20), max_size=6), max_size=6),
)
def test_padded_packing_keeps_every_token(seq_len, batches):
    p = BlockPacker(seq_len=seq_len, eos_id=EOS)
    blocks = list(p.pack_all([[np.array(d, dtype=np.uint32) for d in b] for b in batches]))
    expected = [t for b in batches for d in b if d for t in (*d, EOS)]
    got = np.concatenate([b.ravel() for b in blocks]) if blocks else np.empty(0, np.uint32)
    real = got[got != PAD_TOKEN]
    np.testing.assert_array_equal(real, expected)  # nothing lost, in tokens
    assert np.all(got[len(expected) :] == PAD_TOKEN)  # padding only at the very end
    assert p.padded_tokens == got.size - len(expected) < seq_len
    assert p.dropped_tokens == 0 and p.tail_tokens == len(expected) % seq_len


def test_rejects_bad_seq_len():
    with pytest.raises(ValueError):
        BlockPacker(seq_len=0, eos_id=1)
