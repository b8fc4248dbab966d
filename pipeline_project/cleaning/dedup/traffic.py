"""What the PostgreSQL dedup index moves to and from the database, and the text helpers its COPY needs."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class IndexTraffic:
    """What one open index moved to and from the database: the per-batch cost that must not grow with history."""

    lookup_s: float = 0.0
    commit_s: float = 0.0
    keys_queried: int = 0
    rows_read: int = 0
    bytes_read: int = 0  # key, entry, batch id, document id and signature of every row a lookup or commit read back
    rows_written: int = 0
    bytes_written: int = 0  # the COPY text sent

    def as_dict(self) -> dict:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def row_bytes(batch: str, doc_id: str, sig) -> int:
    return 16 + len(batch) + len(doc_id) + (len(sig) if sig is not None else 0)


def signed(keys: np.ndarray) -> list[int]:
    """uint64 keys as the BIGINTs PostgreSQL stores (same 64 bits)."""
    return np.ascontiguousarray(keys, dtype=np.uint64).view(np.int64).tolist()


def copy_text(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
