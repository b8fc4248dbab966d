"""The resume failures other training-data loaders shipped, each turned into a test of this loader against the real
brokers. Each names the public report it guards against and checks, by content hash over the blocks delivered,
that a resumed run trains every block exactly once and in the order an uninterrupted run would."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from pipeline_project.streaming.errors import StreamingError
from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project_tests.resume_regressions.helpers import BATCH, append, blocks, config, digest, new_topic, read

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def kafka(stack) -> KafkaSettings:
    return KafkaSettings.from_settings(stack)


def _once(*parts: Counter) -> Counter:
    total = sum(parts, Counter())
    assert max(total.values(), default=1) == 1, "a block was delivered twice"
    return total


def test_resuming_twice_in_a_row_equals_one_uninterrupted_run(kafka):
    """huggingface/datasets PR #8295: the second resume of a stateful loader restarted from zero."""
    topic = new_topic(kafka)
    produced = append(kafka, topic, 1, {"en_web": 40})
    whole, _ = read(config(kafka, topic))
    first, s1 = read(config(kafka, topic), max_batches=3)
    second, s2 = read(config(kafka, topic), s1, max_batches=2)
    third, _ = read(config(kafka, topic), s2)
    assert _once(first, second, third) == whole == produced


def test_shrinking_the_data_parallel_degree_and_growing_it_back_drops_no_rank_state(kafka):
    """NVIDIA-NeMo/Megatron-Bridge PR #5637: resuming on fewer ranks kept rank 0's state and dropped rank 1's."""
    topic = new_topic(kafka)
    produced = append(kafka, topic, 1, {"en_web": 48})
    two = [read(config(kafka, topic, rank=r, world_size=2), max_batches=2) for r in range(2)]
    one, merged = read(config(kafka, topic), [s for _, s in two], max_batches=3)
    again = [read(config(kafka, topic, rank=r, world_size=2), merged) for r in range(2)]
    # each rank's short last batch stays unconsumed at the end of the stream; one block per batch reads it
    rest = [read(config(kafka, topic, rank=r, world_size=2, batch_size=1), s)[0] for r, (_, s) in enumerate(again)]
    assert _once(*(c for c, _ in two), one, *(c for c, _ in again), *rest) == produced
    assert sum(sum(c.values()) for c in rest) < 2 * BATCH  # only the short batches were left


def test_resuming_after_the_stream_ended_reads_what_arrived_later(kafka):
    """verl #7401: a resume at an epoch boundary skipped the whole next epoch."""
    topic = new_topic(kafka)
    first = append(kafka, topic, 1, {"en_web": 20})
    seen, state = read(config(kafka, topic))
    assert seen == first
    later = append(kafka, topic, 2, {"en_web": 12})
    again, _ = read(config(kafka, topic), state)
    assert again == later


def test_a_checkpoint_taken_while_the_prefetch_thread_is_ahead_resumes_exactly(kafka):
    """prime-rl PR #3332, accelerate #3938: state saved with workers mid-fetch counted prefetched batches."""
    import time

    from pipeline_project.streaming.load.domain_source import make_loader

    topic = new_topic(kafka)
    produced = append(kafka, topic, 1, {"en_web": 60})
    loader = make_loader(config(kafka, topic, prefetch=4))
    it = iter(loader)
    before = Counter()
    for _ in range(3):
        before.update(digest(row.numpy()) for row in next(it))
    time.sleep(1.0)  # the prefetch thread fills its queue meanwhile
    state = loader.state_dict()
    loader.close()
    after, _ = read(config(kafka, topic), state)
    assert _once(before, after) == produced


def test_a_checkpoint_of_another_topic_is_refused_in_one_line(kafka):
    """NVIDIA-NeMo/RL PR #2519: a checkpoint's data state was silently applied to another dataset."""
    topic, other = new_topic(kafka), new_topic(kafka)
    append(kafka, topic, 1, {"en_web": 12})
    append(kafka, other, 1, {"en_web": 12})
    _, state = read(config(kafka, topic), max_batches=1)
    with pytest.raises(StreamingError) as err:
        read(config(kafka, other), state)
    assert topic in str(err.value) and "\n" not in str(err.value)


def test_a_checkpoint_of_a_topic_deleted_and_made_again_is_refused_in_one_line(kafka):
    """The same name is not the same data: a topic deleted and created again (its ledger retired with it)."""
    topic = new_topic(kafka)
    append(kafka, topic, 1, {"en_web": 12})
    _, state = read(config(kafka, topic), max_batches=1)
    admin = kafka.make_admin()
    admin.delete_topics([topic])[topic].result(timeout=30)
    for _ in range(60):
        if topic not in admin.list_topics(timeout=10).topics:
            break
        time.sleep(0.5)
    from pipeline_project.streaming.kafka.topics import ensure_topic

    ensure_topic(admin, topic, partitions=4, replication_factor=3, min_insync_replicas=2)
    append(kafka, topic, 2, {"en_web": 12})  # batch 1's ledger entry names the deleted topic: refused again
    with pytest.raises(StreamingError) as err:
        read(config(kafka, topic), state)
    assert "\n" not in str(err.value)


def test_data_appended_between_every_restart_is_read_once(kafka):
    """mosaicml/streaming #646: resumption assumed a static dataset; appended data broke it."""
    topic = new_topic(kafka)
    state, seen, produced = None, Counter(), Counter()
    for batch in range(1, 5):
        produced += append(kafka, topic, batch, {"en_web": 8 + batch})
        got, state = read(config(kafka, topic), state)
        seen = _once(seen, got)
    rest, _ = read(config(kafka, topic, batch_size=1), state)  # the short last batch, left unconsumed
    assert _once(seen, rest) == produced and sum(rest.values()) < BATCH


def test_a_domain_dropped_from_the_mixture_and_added_back_resumes_at_its_own_cursor(kafka):
    """Issue 37 finding 2: a domain found only among the retired ones restarted at the active domains' low
    watermark (behind its cursor: replayed; ahead of it: skipped)."""
    topic = new_topic(kafka)
    produced = append(kafka, topic, 1, {"en_web": 40, "code": 40, "books": 40})
    three = {"en_web": 0.4, "code": 0.3, "books": 0.3}
    books = {digest(b) for b in blocks("books", 1, 40)}
    first, s1 = read(config(kafka, topic, mixture=three), max_batches=4)
    assert 0 < len(books & set(first)) < 40  # books were drawn, and some are left
    second, s2 = read(config(kafka, topic, mixture={"en_web": 0.5, "code": 0.5}), s1, max_batches=6)
    assert not books & set(second)
    third, _ = read(config(kafka, topic, mixture=three, idle_timeout_s=3.0), s2)
    assert _once(first, second, third) == produced  # the books left, once: none replayed, none skipped
