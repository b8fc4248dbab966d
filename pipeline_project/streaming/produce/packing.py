"""Pack tokenized documents into fixed-length blocks, DeepSeek-V3 style.

Documents go back to back, each followed by one EOS token (so EOS separates neighbours), with no
padding and no cross-document mask. Full blocks are emitted as soon as they fill; the partial tail
waits in `remainder` for the next documents.

Tail policy (`flush`): by default the partial tail at the end of a stream (up to seq_len - 1 real
tokens) becomes one last block, filled up with `format.PAD_TOKEN`; the padding is counted in
`padded_tokens` and the loader and train loop mask it out, so every document token is delivered.
`flush(pad=False)` drops the tail instead and counts it in `dropped_tokens`. Either way
`tail_tokens` counts the tail's real tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from pipeline_project.streaming.kafka.format import PAD_TOKEN


class BlockPacker:
    def __init__(self, seq_len: int, eos_id: int):
        if seq_len <= 0:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        self.seq_len = seq_len
        self.eos_id = np.uint32(eos_id)
        self.remainder = np.empty(0, dtype=np.uint32)
        self.docs = 0
        self.tokens_in = 0  # document tokens plus separators
        self.blocks_out = 0
        self.dropped_tokens = 0
        self.padded_tokens = 0
        self.tail_tokens = 0  # real tokens of the partial tail, padded or dropped

    def add(self, docs: Sequence[np.ndarray], copies: int = 0) -> np.ndarray:
        """Append documents; return the full blocks now available as (k, seq_len) uint32 (k may be 0).
        `copies`: how many of the (non-empty) `docs` are repeats of a document before them (not counted in `docs`)."""
        docs = [d for d in docs if len(d)]  # an empty document would only add a second EOS
        if not docs:
            return np.empty((0, self.seq_len), dtype=np.uint32)
        lengths = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
        body = np.concatenate(docs).astype(np.uint32, copy=False)
        stream = np.insert(body, np.cumsum(lengths), self.eos_id)
        if self.remainder.size:
            stream = np.concatenate([self.remainder, stream])
        self.docs += len(docs) - copies
        self.tokens_in += int(lengths.sum()) + len(docs)
        n_full = stream.size // self.seq_len
        cut = n_full * self.seq_len
        self.remainder = stream[cut:].copy()
        self.blocks_out += n_full
        return stream[:cut].reshape(n_full, self.seq_len)

    def flush(self, pad: bool = True) -> np.ndarray:
        """End of stream: pad the partial tail with PAD_TOKEN into one last block, or drop it (counted)."""
        tail = self.remainder
        self.remainder = np.empty(0, dtype=np.uint32)
        if not tail.size:
            return np.empty((0, self.seq_len), dtype=np.uint32)
        self.tail_tokens += int(tail.size)
        if not pad:
            self.dropped_tokens += int(tail.size)
            return np.empty((0, self.seq_len), dtype=np.uint32)
        fill = self.seq_len - tail.size
        self.padded_tokens += fill
        self.blocks_out += 1
        return np.concatenate([tail, np.full(fill, PAD_TOKEN, dtype=np.uint32)]).reshape(1, self.seq_len)

    def pack_all(self, doc_batches: Iterable[Sequence[np.ndarray]], pad: bool = True) -> Iterable[np.ndarray]:
        """Generator over non-empty block arrays for a stream of document batches, flushing at the end."""
        for batch in doc_batches:
            blocks = self.add(batch)
            if len(blocks):
                yield blocks
        last = self.flush(pad=pad)
        if len(last):
            yield last

    def stats(self) -> dict[str, int]:
        return {
            "docs": self.docs,
            "tokens_in": self.tokens_in,
            "blocks": self.blocks_out,
            "block_tokens": self.blocks_out * self.seq_len,
            "tail_tokens": self.tail_tokens,
            "dropped_tail_tokens": self.dropped_tokens,
            "padded_tokens": self.padded_tokens,
        }


class DomainPackers:
    """One `BlockPacker` per domain, so a block never mixes domains (documents of domain None share one packer).

    `add(docs, domains)` returns `(domain, blocks)` pairs in the order the domains first appear in the call;
    `flush` pads (or drops) every domain's tail, in the order the domains first appeared in the stream. The
    counters and `stats()` are the sums over the domains; `per_domain()` has each domain's `stats()`.
    `add(..., repeats)` packs each document `repeats[i]` times in a row (rehydration, `cleaning.rehydration`):
    `docs` still counts documents; `rehydrated_docs` / `rehydration_copies` count those repeated and the extra
    copies (present once a repeat was asked for).
    """

    def __init__(self, seq_len: int, eos_id: int):
        self.seq_len = seq_len
        self.eos_id = eos_id
        self.packers: dict[str | None, BlockPacker] = {}
        self.fim_docs: dict[str | None, int] | None = None  # documents laid out for FIM per domain (None: FIM off)
        self.rehydrated: dict[str | None, list[int]] | None = None  # domain -> [documents repeated, extra copies]

    def _packer(self, domain: str | None) -> BlockPacker:
        if domain not in self.packers:
            self.packers[domain] = BlockPacker(self.seq_len, self.eos_id)
        return self.packers[domain]

    def add(
        self, docs: Sequence[np.ndarray], domains: Sequence[str | None], repeats: Sequence[int] | None = None
    ) -> list[tuple[str | None, np.ndarray]]:
        groups: dict[str | None, list[np.ndarray]] = {}
        copies: dict[str | None, int] = {}
        for i, (doc, domain) in enumerate(zip(docs, domains, strict=True)):
            n = max(1, int(repeats[i])) if repeats is not None and len(doc) else 1
            groups.setdefault(domain, []).extend([doc] * n)
            if n > 1:
                self._note_repeat(domain, n - 1)
                copies[domain] = copies.get(domain, 0) + n - 1
        out = []
        for domain, group in groups.items():
            blocks = self._packer(domain).add(group, copies.get(domain, 0))
            if len(blocks):
                out.append((domain, blocks))
        return out

    def _note_repeat(self, domain: str | None, extra: int) -> None:
        if self.rehydrated is None:
            self.rehydrated = {}
        counts = self.rehydrated.setdefault(domain, [0, 0])
        counts[0] += 1
        counts[1] += extra

    def flush(self, pad: bool = True) -> list[tuple[str | None, np.ndarray]]:
        out = []
        for domain, packer in self.packers.items():
            last = packer.flush(pad=pad)
            if len(last):
                out.append((domain, last))
        return out

    def _sum(self, name: str) -> int:
        return sum(getattr(p, name) for p in self.packers.values())

    @property
    def tail_tokens(self) -> int:
        return self._sum("tail_tokens")

    @property
    def dropped_tokens(self) -> int:
        return self._sum("dropped_tokens")

    def stats(self) -> dict[str, int]:
        total: dict[str, int] = dict.fromkeys(BlockPacker(self.seq_len, self.eos_id).stats(), 0)
        for packer in self.packers.values():
            for k, v in packer.stats().items():
                total[k] += v
        if self.fim_docs is not None:
            total["fim_docs"] = sum(self.fim_docs.values())
        if self.rehydrated is not None:
            total["rehydrated_docs"] = sum(c[0] for c in self.rehydrated.values())
            total["rehydration_copies"] = sum(c[1] for c in self.rehydrated.values())
        return total

    def per_domain(self) -> dict[str, dict[str, int]]:
        """Each labelled domain's packing counts (documents without a domain are left out)."""
        fim, rehydrated = self.fim_docs, self.rehydrated
        out = {}
        for d, p in self.packers.items():
            if d is None:
                continue
            out[d] = {**p.stats(), **({"fim_docs": fim.get(d, 0)} if fim is not None else {})}
            if rehydrated is not None:
                out[d]["rehydrated_docs"], out[d]["rehydration_copies"] = rehydrated.get(d, (0, 0))
        return out
