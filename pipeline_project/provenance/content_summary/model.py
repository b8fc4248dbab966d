"""What the training-content summary is built from: plain records, gathered from the stores by `gather.py` or
made by hand in a test. Nothing here reads a store."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pipeline_project.ingest.manifest import RawObject

TBC = "to be completed by the provider"
TEMPLATE = (
    "EU AI Act Art. 53(1)(d): public summary of the content used for training, European Commission template (July 2025)"
)


class DocKey(NamedTuple):
    """One class of documents of a batch: its raw object, profile, language and what the cleaning decided."""

    source: str  # the raw object's S3 key
    domain: str  # the cleaning profile ("" when none)
    lang: str  # the language the steps judged it in ("" when none)
    decision: str  # kept | dropped | quarantined
    step: str  # the step that dropped or quarantined it ("" when kept)
    reason: str  # the reason's head (`reason_head`): "exact_duplicate_of", "blocked", "decontaminated", ...


KEEP_WHOLE = ("blocked", "decontaminated")  # their tail names a request or a benchmark, not one document


def reason_head(reason: str | None) -> str:
    """The class of a reason: what precedes its first ':' (`exact_duplicate_of:<batch>/<doc>` ->
    `exact_duplicate_of`), whole for `blocked:<request>` and `decontaminated:<benchmark>`."""
    head = (reason or "").split(":", 1)[0]
    return (reason or "") if head in KEEP_WHOLE else head


@dataclass
class BatchInput:
    """One batch the checkpoint trained on, as the stores hold it."""

    batch_id: str
    objects: tuple[RawObject, ...] = ()  # the batch manifest's raw objects (empty: no manifest found)
    counts: dict[str, int] | None = None  # the shard manifest's in / kept / dropped / quarantined (None: none)
    config_hash: str = ""  # the cleaning config the shard manifest names
    tally: Counter[DocKey] | None = None  # documents by class (None: no attribute file or exclusion sink read)
    produced: dict[str, Any] | None = None  # the ledger record: blocks, tokens, domains, packing, ...
    retired: bool = False  # its trained blocks belong to a retired ledger entry
    trained_blocks: int = 0  # blocks of it the checkpoint's ranks trained (from the step logs)


@dataclass
class Provider:
    """What only the provider knows; whatever is left empty is written as `TBC`."""

    provider: str = ""
    model: str = ""
    contact: str = ""
    # raw source prefix -> template section ("2.1" public datasets, "2.2" private, "2.3" crawled, "2.4" user data,
    # "2.5" synthetic, "2.6" other): the pipeline knows where an object came from, not how it was obtained
    source_categories: dict[str, str] = field(default_factory=dict)
    crawler_opt_out_policy: str = ""  # how robots.txt / TDM reservations were respected when collecting
    illegal_content_measures: str = ""  # measures against illegal content beyond the pipeline's filters

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Provider:
        d = d or {}
        names = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown provider fields {unknown}; known: {sorted(names)}")
        return cls(**d)


@dataclass
class RetractionInput:
    """One retraction request in the topic's retractions topic, with what the checkpoint did about it."""

    request_id: str
    reason: str
    blocks: int  # blocks it names by index
    whole_messages: int = 0  # messages it names whole (their block count is the message's)
    passed_over: int = 0  # blocks of it this checkpoint's steps skipped (the step logs' `retracted`)
    trained_before: int = 0  # blocks of it this checkpoint's steps trained before the retraction reached them

    @property
    def kind(self) -> str:
        """takedown | retire | retune | ... (the request id's head)."""
        return reason_head(self.request_id)


@dataclass
class SummaryInputs:
    lineage: str
    checkpoint_step: int
    checkpoint_uri: str
    checkpoint_created_at: str
    topic: str
    seq_len: int
    batches: list[BatchInput]
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)  # config hash -> CleaningConfig as JSON
    retractions: list[RetractionInput] = field(default_factory=list)
    unattributed_blocks: int = 0  # trained blocks in no ledger record's offsets
    steps_read: int = 0  # checkpoints whose step logs were read (the lineage walked back from the checkpoint)
    raw_prefix: str = "raw/"
    source_depth: int = 1  # a source is the prefix this many levels under `raw_prefix`
    fim: dict[str, Any] = field(default_factory=dict)  # the producer's fill-in-the-middle settings
    provider: Provider = field(default_factory=Provider)
