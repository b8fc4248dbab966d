"""What a retraction says: which blocks of the token topic, why, and under which request."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

RETRACTION_VERSION = 1
REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,199}")


class BlockRange(BaseModel):
    """Blocks [first, end) of the message at `offset` of `partition`; `end` None: to the message's last block."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
    first: int = Field(default=0, ge=0)
    end: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _not_empty(self) -> BlockRange:
        if self.end is not None and self.end <= self.first:
            raise ValueError(f"block range [{self.first}, {self.end}) of {self.partition}@{self.offset} is empty")
        return self

    def holds(self, block: int) -> bool:
        return block >= self.first and (self.end is None or block < self.end)


class Retraction(BaseModel):
    """One request: its id (the topic's key, so a request is written once), a reason and the blocks it retracts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = RETRACTION_VERSION
    request_id: str
    reason: str = Field(min_length=1)
    blocks: tuple[BlockRange, ...] = Field(min_length=1)
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    operator: str | None = None

    @field_validator("request_id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        if not REQUEST_ID.fullmatch(value):
            raise ValueError(
                f"request id {value!r}: 1-200 of letters, digits and ._:@/- (starting with a letter/digit)"
            )
        return value
