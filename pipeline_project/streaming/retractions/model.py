"""What a retraction says: which blocks of the token topic, why, and under which request."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

RETRACTION_VERSION = 1
# ranges per record: a run or a partial range is at most ~110 bytes of JSON, so a record stays under ~600 kB
PART_RANGES = 5000
REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}")


class BlockRange(BaseModel):
    """Blocks [first, end) of the message at `offset` of `partition`; `end` None: to the message's last block.
    With `last_offset`: every message from `offset` to `last_offset` whole (a run; offsets in it that hold no
    message, transaction markers, are no matter)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
    first: int = Field(default=0, ge=0)
    end: int | None = Field(default=None, gt=0)
    last_offset: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _not_empty(self) -> BlockRange:
        if self.end is not None and self.end <= self.first:
            raise ValueError(f"block range [{self.first}, {self.end}) of {self.partition}@{self.offset} is empty")
        if self.last_offset is not None and (self.last_offset < self.offset or self.first or self.end is not None):
            raise ValueError(
                f"a run of messages {self.partition}@{self.offset}..{self.last_offset} holds whole messages, "
                "ending at or after its first"
            )
        return self

    @property
    def whole(self) -> bool:
        """Whole messages (one, or a run)."""
        return self.first == 0 and self.end is None

    @property
    def last(self) -> int:
        return self.offset if self.last_offset is None else self.last_offset

    def holds(self, block: int) -> bool:
        return block >= self.first and (self.end is None or block < self.end)


def ordered(blocks: tuple[BlockRange, ...] | list[BlockRange]) -> tuple[BlockRange, ...]:
    """Ranges in one order whatever order they were named in: how two requests' ranges compare."""
    return tuple(sorted(blocks, key=lambda b: (b.partition, b.offset, b.first, b.last, b.end or 0)))


class Retraction(BaseModel):
    """One request: its id (the topic's key, so a request is written once), a reason and the blocks it retracts.
    A request of more than `PART_RANGES` ranges is written as `parts` records (`split`), each under a key of its
    own, so no record nears Kafka's message size whatever a request names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = RETRACTION_VERSION
    request_id: str
    reason: str = Field(min_length=1)
    blocks: tuple[BlockRange, ...] = Field(min_length=1)
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    operator: str | None = None
    part: int = Field(default=0, ge=0)
    parts: int = Field(default=1, ge=1)

    @property
    def key(self) -> str:
        """The record's key in the compacted topic."""
        return self.request_id if self.parts == 1 else f"{self.request_id}#{self.part}/{self.parts}"

    def split(self, per_part: int | None = None) -> list[Retraction]:
        """The records this request is written as: its ranges in order, `per_part` to a record (the same request
        always splits the same way, so a retry rewrites exactly the parts it lacks)."""
        per_part = per_part or PART_RANGES
        chunks = [self.blocks[i : i + per_part] for i in range(0, len(self.blocks), per_part)]
        if len(chunks) == 1:
            return [self]
        return [self.model_copy(update={"blocks": c, "part": i, "parts": len(chunks)}) for i, c in enumerate(chunks)]

    def to_json(self) -> bytes:
        return self.model_dump_json(exclude_none=True, exclude={"part", "parts"} if self.parts == 1 else None).encode()

    @model_validator(mode="after")
    def _part_of_parts(self) -> Retraction:
        if self.part >= self.parts:
            raise ValueError(f"part {self.part} of {self.parts}: parts count from 0")
        return self

    @field_validator("request_id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        if not REQUEST_ID.fullmatch(value):
            raise ValueError(
                f"request id {value!r}: 1-200 of letters, digits and ._:@/- (starting with a letter/digit)"
            )
        return value
