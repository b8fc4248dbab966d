"""Fill-in-the-middle (FIM) for code documents, applied at tokenize time, DeepSeek-V3 style.

A document chosen for FIM is cut at two points into prefix, middle and suffix and laid out with the
tokenizer's own sentinels (`<｜fim▁begin｜>`, `<｜fim▁hole｜>`, `<｜fim▁end｜>`):

    psm  begin  prefix  hole  suffix  end  middle          (DeepSeek-V3, the FIM paper's PSM)
    spm  begin  hole  suffix  end  prefix  middle          (the FIM paper's SPM variant)

The sentinels are inserted as token ids, never as text, so a document cannot forge them.

Where the cut falls (`split`):

    char   at two character offsets, before tokenizing; each part is tokenized on its own. This is what
           DeepSeek and the FIM paper do: the middle may start or end inside what would have been one token,
           so the model learns to fill a hole at any cursor position. The three parts decode back to the text.
    token  at two token offsets of the whole document's ids: the three parts concatenate to exactly the
           document's token sequence, and no document is tokenized twice.

Determinism: whether a document gets FIM, and where it is cut, is a function of (seed, document id) only:
xxh3-64 with three derived seeds, so a re-run (the producer's retry, which re-tokenizes and checks the
committed prefix by hash) produces the same blocks. The document id is the xxh3-64 of the document's UTF-8
text: the token path carries (domain, text), and content addressing makes the draw independent of the
document's position and of how the batch was sharded.

A rate is per domain; a domain absent from `FimPolicy.domains` gets no FIM. The default policy is off for
every domain; `FimPolicy.deepseek()` is code at 0.1, PSM. `FimPolicy.fingerprint()` enters the ledger's
fingerprint, so changing the FIM config of a produced batch is refused as other content.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import xxhash
from pydantic import BaseModel, ConfigDict, Field

FIM_BEGIN = "<｜fim▁begin｜>"
FIM_HOLE = "<｜fim▁hole｜>"
FIM_END = "<｜fim▁end｜>"
_SCALE = float(1 << 64)


class FimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    rate: float = Field(default=0.1, ge=0.0, le=1.0)  # fraction of the domain's documents
    mode: Literal["psm", "spm"] = "psm"
    split: Literal["char", "token"] = "char"


class FimPolicy(BaseModel):
    """FIM per domain (a domain not listed gets none) and the seed of the draws."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    domains: dict[str, FimConfig] = Field(default_factory=dict)
    seed: int = 0

    @classmethod
    def deepseek(cls, seed: int = 0) -> FimPolicy:
        return cls(domains={"code": FimConfig(rate=0.1, mode="psm")}, seed=seed)

    @property
    def active(self) -> bool:
        return any(c.rate > 0 for c in self.domains.values())

    def fingerprint(self) -> str:
        """ "" when off (so batches produced before FIM keep their ledger fingerprint), else a sha256 prefix."""
        if not self.active:
            return ""
        body = json.dumps({"fim": self.model_dump(mode="json"), "v": 1}, sort_keys=True, separators=(",", ":"))
        return "fim:" + hashlib.sha256(body.encode()).hexdigest()[:16]


def document_id(text: str) -> bytes:
    return xxhash.xxh3_64_digest(text.encode("utf-8", "surrogatepass"))


def _draw(doc_id: bytes, seed: int, k: int) -> int:
    return xxhash.xxh3_64_intdigest(doc_id, seed=(seed * 3 + k) & 0xFFFFFFFFFFFFFFFF)


def chosen(doc_id: bytes, seed: int, rate: float) -> bool:
    return rate > 0 and _draw(doc_id, seed, 0) / _SCALE < rate


def split_points(doc_id: bytes, seed: int, length: int) -> tuple[int, int]:
    """Two cut points 0 <= i <= j <= length, uniform and independent, sorted (as in the FIM paper)."""
    a, b = (_draw(doc_id, seed, k) % (length + 1) for k in (1, 2))
    return (a, b) if a <= b else (b, a)


class FimSentinels:
    def __init__(self, begin: int, hole: int, end: int):
        self.begin, self.hole, self.end = (np.array([t], dtype=np.uint32) for t in (begin, hole, end))

    @classmethod
    def of(cls, tokenizer) -> FimSentinels:
        """The ids of the FIM tokens in a `TokenizerInfo`'s tokenizer; a clear error when it has none."""
        tok = tokenizer.tokenizer
        ids = [tok.convert_tokens_to_ids(t) for t in (FIM_BEGIN, FIM_HOLE, FIM_END)]
        if any(i is None or i == tok.unk_token_id for i in ids):
            raise ValueError(f"tokenizer {tokenizer.name} has no FIM tokens {FIM_BEGIN} {FIM_HOLE} {FIM_END}")
        return cls(*ids)

    def arrange(self, mode: str, prefix: np.ndarray, middle: np.ndarray, suffix: np.ndarray) -> np.ndarray:
        if mode == "psm":
            parts = [self.begin, prefix, self.hole, suffix, self.end, middle]
        else:
            parts = [self.begin, self.hole, suffix, self.end, prefix, middle]
        return np.concatenate([np.asarray(p, dtype=np.uint32) for p in parts])


Encode = Callable[[list[str]], list[np.ndarray]]


class FimApplier:
    """Tokenizes a batch of (domain, text) documents, laying out the chosen ones for FIM; counts them per domain."""

    def __init__(self, policy: FimPolicy, sentinels: FimSentinels):
        self.policy = policy
        self.sentinels = sentinels
        self.counts: dict[str | None, int] = {}
        self.last_chosen: list[bool] = []

    def encode(self, texts: Sequence[str], domains: Sequence[str | None], encode: Encode) -> list[np.ndarray]:
        plans = [self._plan(t, d) for t, d in zip(texts, domains, strict=True)]
        self.last_chosen = [p is not None for p in plans]  # which documents of this call FIM laid out
        char_cuts = {i: p for i, p in enumerate(plans) if p is not None and p[0].split == "char"}
        whole = [t for i, t in enumerate(texts) if i not in char_cuts]
        parts = [part for i, (_c, (a, b)) in char_cuts.items() for part in (texts[i][:a], texts[i][a:b], texts[i][b:])]
        ids_whole = iter(encode(whole) if whole else [])
        ids_parts = iter(encode(parts) if parts else [])
        out = []
        for i, plan in enumerate(plans):
            if i in char_cuts:
                prefix, middle, suffix = next(ids_parts), next(ids_parts), next(ids_parts)
                out.append(self.sentinels.arrange(plan[0].mode, prefix, middle, suffix))
                continue
            ids = next(ids_whole)
            if plan is not None:  # token-level cut, drawn over the document's token count
                a, b = split_points(document_id(texts[i]), self.policy.seed, len(ids))
                ids = self.sentinels.arrange(plan[0].mode, ids[:a], ids[a:b], ids[b:])
            out.append(ids)
        return out

    def _plan(self, text: str, domain: str | None) -> tuple[FimConfig, tuple[int, int]] | None:
        config = self.policy.domains.get(domain) if domain is not None else None
        if config is None or not text:
            return None
        doc_id = document_id(text)
        if not chosen(doc_id, self.policy.seed, config.rate):
            return None
        self.counts[domain] = self.counts.get(domain, 0) + 1
        return config, split_points(doc_id, self.policy.seed, len(text))
