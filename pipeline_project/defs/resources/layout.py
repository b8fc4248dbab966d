"""Where the pipeline keeps things, per deployment: the bucket and its prefixes (storage), the token topic
(`TopicConfig`, the Dagster face of `streaming.topic.TopicSpec`) and how raw objects become batches (`IntakeConfig`)."""

from __future__ import annotations

import dagster as dg
from pydantic import ConfigDict

from pipeline_project.ingest.listing.cursor import Limits
from pipeline_project.settings import DEFAULT_BUCKET, DEFAULT_FIM_CODE_RATE, DEFAULT_RAW_PREFIX, DEFAULT_TOPIC
from pipeline_project.streaming.kafka.format import DEFAULT_MESSAGE_BYTES, DEFAULT_SEQ_LEN
from pipeline_project.streaming.topic import TopicSpec


class TopicConfig(dg.Config):
    """The token topic as Dagster config: `spec()` is the `TopicSpec` every part of the pipeline gets. The fields
    are TopicSpec's (a test keeps them equal), with fill-in-the-middle for the code domain as three fields."""

    model_config = ConfigDict(extra="forbid")

    name: str = DEFAULT_TOPIC
    partitions: int = 8
    replication_factor: int = 3
    min_insync_replicas: int = 2
    retention_ms: int = -1
    """retention.ms; -1 (the default) keeps blocks forever: a checkpoint's saved position must still find them."""
    retention_bytes: int = -1
    """retention.bytes per partition; -1 (the default): no size limit."""
    seq_len: int = DEFAULT_SEQ_LEN
    message_bytes: int = DEFAULT_MESSAGE_BYTES
    """Target Kafka message size (`streaming.kafka.format.DEFAULT_MESSAGE_BYTES` says why this default)."""
    fim_code_rate: float = DEFAULT_FIM_CODE_RATE
    """Fill-in-the-middle (`streaming.produce.fim`) for the code domain: the fraction of code documents laid out
    prefix-suffix-middle (DeepSeek-V3: 0.1; $PIPELINE_FIM_CODE_RATE, which the local stack's Dagster sets). 0 (the
    default) is off; other domains never get FIM. Part of the ledger fingerprint: a batch produced with one rate is
    refused with another."""
    fim_mode: str = "psm"
    """"psm" (DeepSeek-V3) or "spm"."""
    fim_seed: int = 0
    rehydration: bool = False
    """FineWeb-2 rehydration (`cleaning.dedup.rehydration`): `token_blocks` packs each kept document as many times as
    its duplicate-cluster size, frozen in the batch's attribute file, says (1x..8x). Off by default. Part of the
    ledger fingerprint: a batch produced with it off is refused with it on, and the other way round."""

    def spec(self) -> TopicSpec:
        from pipeline_project.streaming.produce.fim import FimConfig, FimPolicy

        fim = FimPolicy()
        if self.fim_code_rate:
            fim = FimPolicy(
                domains={"code": FimConfig(rate=self.fim_code_rate, mode=self.fim_mode)}, seed=self.fim_seed
            )
        fields = self.model_dump(exclude={"fim_code_rate", "fim_mode", "fim_seed"})
        return TopicSpec(**fields, fim=fim)


class IntakeConfig(dg.Config):
    """How the raw S3 sensor turns new objects into batches: the size of a batch, how many a tick registers, and
    the listing's bounds. Set per deployment as JSON of these fields in $PIPELINE_INTAKE (unset: these defaults).

    The size of a batch trades run overhead against retry cost. Each batch is one `ingest_batch` run (a launch,
    on Kubernetes a pod, plus a manifest, a partition, a ledger entry), so small batches spend a larger share
    of the cluster on starting runs, and push more partitions and runs through Dagster's storage and run queue.
    A failed batch is retried whole, so large batches redo more work after a failure, and hold their objects
    back from training longer (a batch's tokens reach the topic when its run ends)."""

    model_config = ConfigDict(extra="forbid")

    max_objects_per_batch: int = 500
    max_batch_mb: int = 1024
    """A batch closes at max_objects_per_batch objects or max_batch_mb of raw bytes, whichever comes first (one
    object larger than max_batch_mb gets a batch of its own)."""
    max_batches_per_tick: int = 100
    """A tick registers as many batches as its new objects fill, at most this many: intake keeps up with up to
    max_batches_per_tick x max_batch_mb per tick (every 15 s). A backlog larger than that is taken over the next
    ticks. Each batch costs the tick one manifest write (a GET and a PUT)."""
    max_tick_seconds: float = 30.0
    """A tick opens no new batch this many seconds after it began (it fills the one open, then writes the
    manifests), so a tick over a slow listing stays well inside Dagster's 60 s sensor timeout; the rest waits
    for the next tick."""
    full_scan_every: int = 40
    """The sensor lists keys after the last one taken (cost O(new objects) for append-style key layouts) and
    scans the keys before it N ticks after its last scan finished (N=40: every 10 minutes), which finds keys
    that land out of order. 1: a new scan starts as soon as one finishes (any key layout). 0: only the first
    tick scans (strictly append-only keys)."""
    full_scan_pages_per_tick: int = 10
    full_scan_seconds_per_tick: float = 20.0
    """A scan reads at most this many 1000-key pages per tick, and starts no page after this many seconds
    (Dagster gives a sensor tick 60 s), then goes on from its position on the next tick."""
    full_scan_lookback_s: float = 900.0
    """A scan takes objects stamped up to this long before the previous scan began. An object can be stamped
    before it is listable (a multipart upload carries the time it was initiated), so this bounds how long an
    upload of a key that sorts before the cursor may take. The cursor holds the keys taken over this window."""
    source_prefix_depth: int = 1
    """Prefixes this many levels under raw_prefix are sources with cursors of their own (1: `raw/books/`,
    `raw/web/`), so a new key is found on the next tick even when it sorts before the keys taken (a new source,
    or an upload into an older one). 0: one cursor for the whole prefix (keys that sort before it wait for a scan).
    Files above this depth, and keys that sort before their source's position, are found by the append listing or
    the scan as before."""
    max_source_prefixes: int = 200
    """At most this many sources keep a position in the cursor (the one idle longest is dropped first; the scan
    covers a dropped source). Each tick lists each of them once, for at most 15 s, the rest on the next tick."""

    @classmethod
    def from_json(cls, text: str | None) -> IntakeConfig:
        """The intake a deployment configures: JSON of these fields ($PIPELINE_INTAKE); unset: the defaults."""
        return cls.model_validate_json(text) if text else cls()

    def limits(self) -> Limits:
        """The plain-Python listing limits (`ingest.listing.cursor.Limits`) these fields set."""
        return Limits(
            max_objects=self.max_objects_per_batch,
            max_bytes=self.max_batch_mb << 20,
            full_scan_every=self.full_scan_every,
            scan_pages=self.full_scan_pages_per_tick,
            scan_seconds=self.full_scan_seconds_per_tick,
            lookback_s=self.full_scan_lookback_s,
            source_depth=self.source_prefix_depth,
            max_sources=self.max_source_prefixes,
            max_batches=self.max_batches_per_tick,
            tick_seconds=self.max_tick_seconds,
        )


class PipelineLayout(dg.ConfigurableResource):
    """A field this does not have is refused, not ignored (a setting of an older layout names its group now)."""

    model_config = ConfigDict(extra="forbid")

    bucket: str = DEFAULT_BUCKET
    raw_prefix: str = DEFAULT_RAW_PREFIX
    shards_prefix: str = "shards/"
    exclusions_prefix: str = "exclusions/"
    checkpoints_prefix: str = "checkpoints/"
    topic: TopicConfig = TopicConfig()
    intake: IntakeConfig = IntakeConfig()

    @property
    def topic_spec(self) -> TopicSpec:
        return self.topic.spec()

    def rehydration_config(self):
        from pipeline_project.cleaning.dedup.rehydration import RehydrationConfig

        return RehydrationConfig(enabled=self.topic.rehydration)

    def shard_dir(self, batch_id: str) -> str:
        return f"{self.shards_prefix}{batch_id}/"

    def exclusions_dir(self, batch_id: str) -> str:
        return f"{self.exclusions_prefix}{batch_id}/"
