"""Domain mixture: which domain the next block is drawn from, deterministically, as pure logic.

`MixtureConfig` names the target proportions (e.g. `{en_web: 0.5, zh_web: 0.3, code: 0.15, books: 0.05}`) and
what happens when a domain runs dry. `MixtureSampler` turns them into a sequence of domains with smooth weighted
round robin (the nginx upstream algorithm) in integer arithmetic: every draw adds each active domain's weight
(in parts per million) to its credit, picks the domain with the largest credit (ties: the earlier domain in
name order) and takes the total weight from it. No random draw is involved, so the realized count of every
domain stays within a couple of blocks of `n * proportion` at every prefix of the sequence (not only in
expectation), and any window of the sequence is mixed as well as the whole. The seed only sets the initial
credits (the phase of the sequence).

`RankMixture` is one DDP rank's view. The global sequence is cut into steps of `world_size * batch_size`
draws, and every draw of a step is dealt to exactly one rank (balanced per domain, see the class). So the
ranks' shares are disjoint, their union is exactly the single-rank sequence of the same global batch, and
every rank's batch is itself mixed like the whole. Each rank runs the same sampler (a few integer operations
per draw), so no communication is needed; at batch boundaries every rank's sampler state is the same.

State (`state_dict()`): a small JSON-able dict: the weights in parts, the credits, how many blocks of each
domain were drawn since the weights were set and in total, and the domains marked exhausted. Loading it
continues the sequence exactly. Loading it under other proportions (the config changed between checkpoints)
keeps the totals, restarts the credits from the seed and counts `since_change` afresh: the new proportions
hold from that block on. The data position is not part of this module: every domain has its own cursors,
so changing proportions never replays or skips a block.

Exhausted domains (`on_domain_exhausted`): `wait` (the default) keeps the proportions exact: a draw of a dry
domain waits for its next block (a bounded loader ends there, without consuming the partial batch, and the
next invocation continues the same sequence once new blocks of that domain arrive; a streaming loader keeps
waiting); `stop` ends the stream at the first draw a dry domain cannot serve, also in streaming mode;
`renormalize` drops the domain from the draw (the others keep their relative proportions) until the loader
is built again with more data.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

PARTS = 1_000_000  # weights are integer parts per million: exact, platform-independent arithmetic
SAMPLER_STATE_VERSION = 1
ExhaustedPolicy = Literal["wait", "stop", "renormalize"]
DEFAULT_EXHAUSTED_POLICY: ExhaustedPolicy = "wait"


class MixtureConfig(BaseModel):
    """Target proportions per domain and the policy for a domain that runs dry; bump `version` on semantics."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    proportions: dict[str, float] = Field(min_length=1)
    on_domain_exhausted: ExhaustedPolicy = DEFAULT_EXHAUSTED_POLICY

    @field_validator("proportions")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {d: w for d, w in value.items() if not w >= 0 or not d}
        if bad or sum(value.values()) <= 0:
            raise ValueError(f"proportions must be non-negative with a positive sum, named domains: {value}")
        return dict(sorted(value.items()))

    def parts(self) -> dict[str, int]:
        return to_parts(self.proportions)


def to_parts(proportions: Mapping[str, float]) -> dict[str, int]:
    """Proportions as integer parts summing to PARTS exactly (largest remainder), in domain name order."""
    total = float(sum(proportions.values()))
    raw = {d: w / total * PARTS for d, w in sorted(proportions.items())}
    parts = {d: int(v) for d, v in raw.items()}
    by_remainder = sorted(raw, key=lambda d: (-(raw[d] - parts[d]), d))
    for d in by_remainder[: PARTS - sum(parts.values())]:
        parts[d] += 1
    return parts


def _initial_credits(parts: Mapping[str, int], seed: int) -> dict[str, int]:
    rng = random.Random(f"mixture:{seed}")
    return {d: rng.randrange(w) if w > 0 else 0 for d, w in parts.items()}


class MixtureSampler:
    """The global sequence of domains, by smooth weighted round robin; `next()` is the domain of the next block."""

    def __init__(self, proportions: Mapping[str, float], *, seed: int = 0):
        self.seed = seed
        self.parts = to_parts(proportions)
        self.credits = _initial_credits(self.parts, seed)
        self.since_change = dict.fromkeys(self.parts, 0)
        self.totals = dict.fromkeys(self.parts, 0)
        self.exhausted: set[str] = set()
        self._last: tuple[str, int, tuple[str, ...]] | None = None  # (domain, total, active) of the last draw

    @property
    def domains(self) -> tuple[str, ...]:
        return tuple(self.parts)

    def active(self) -> tuple[str, ...]:
        return tuple(d for d, w in self.parts.items() if w > 0 and d not in self.exhausted)

    def next(self) -> str | None:
        """The next domain; None when every domain with a weight is exhausted."""
        active = self.active()
        if not active:
            return None
        total = 0
        for d in active:
            w = self.parts[d]
            self.credits[d] += w
            total += w
        pick = max(active, key=lambda d: self.credits[d])  # max keeps the first of equal credits: name order
        self.credits[pick] -= total
        self.since_change[pick] += 1
        self.totals[pick] += 1
        self._last = (pick, total, active)
        return pick

    def undo(self) -> None:
        """Take back the last draw (its block could not be served); only the very last draw can be taken back."""
        if self._last is None:
            raise RuntimeError("no draw to undo")
        pick, total, active = self._last
        self.credits[pick] += total
        for d in active:
            self.credits[d] -= self.parts[d]
        self.since_change[pick] -= 1
        self.totals[pick] -= 1
        self._last = None

    def exhaust(self, domain: str) -> None:
        """Leave `domain` out of the draw (renormalize): the other domains keep their relative proportions."""
        self.exhausted.add(domain)
        self._last = None

    def realized(self) -> dict[str, float]:
        """The share of each domain among the blocks drawn since the proportions were set."""
        n = sum(self.since_change.values())
        return {d: (c / n if n else 0.0) for d, c in self.since_change.items()}

    def target(self) -> dict[str, float]:
        return {d: w / PARTS for d, w in self.parts.items()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": SAMPLER_STATE_VERSION,
            "seed": self.seed,
            "parts": dict(self.parts),
            "credits": dict(self.credits),
            "since_change": dict(self.since_change),
            "totals": dict(self.totals),
            "exhausted": sorted(self.exhausted),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> bool:
        """Continue from `state`; True when it had these proportions and seed (the sequence continues exactly).

        Otherwise the totals are kept, the credits restart from the seed and `since_change` from zero.
        """
        if state.get("version") != SAMPLER_STATE_VERSION:
            raise ValueError(f"mixture sampler state version {state.get('version')!r} != {SAMPLER_STATE_VERSION}")
        self._last = None
        totals = {d: int(c) for d, c in state["totals"].items()}
        same = dict(state["parts"]) == self.parts and int(state["seed"]) == self.seed
        if same:
            self.credits = {d: int(state["credits"][d]) for d in self.parts}
            self.since_change = {d: int(state["since_change"][d]) for d in self.parts}
            self.exhausted = set(state.get("exhausted", ())) & set(self.parts)
        else:
            self.credits = _initial_credits(self.parts, self.seed)
            self.since_change = dict.fromkeys(self.parts, 0)
            self.exhausted = set()
        self.totals = {**totals, **{d: totals.get(d, 0) for d in self.parts}}  # dropped domains keep their count
        return same


class RankMixture:
    """One rank's share of every step of `world_size * batch_size` draws of the global sequence.

    At the start of a step the whole step is drawn (identically on every rank); its draws are sorted by domain
    and dealt round robin over the ranks, starting at rank `step % world_size`, and each rank takes its
    `batch_size` draws in their order in the sequence. So every global position belongs to exactly one rank,
    every rank's batch holds each domain within one block of its share of the step, and the rotating start
    spreads the odd blocks of the small domains over the ranks.

    `peek()` is the domain of this rank's next block, `served()` moves past it once delivered. A saved state is
    the sampler's state at the start of the current step, the step number and the blocks served of it: loading
    it draws the step again and continues exactly.
    """

    def __init__(self, sampler: MixtureSampler, *, rank: int = 0, world_size: int = 1, batch_size: int = 1):
        if not 0 <= rank < world_size or batch_size < 1:
            raise ValueError(f"rank {rank} outside world_size {world_size}, or batch_size {batch_size} < 1")
        self.sampler = sampler
        self.rank = rank
        self.world_size = world_size
        self.batch_size = batch_size
        self.step = 0  # steps completed by this rank
        self.pending: list[tuple[int, str]] = []  # (position in the step, domain) of this rank's undelivered draws
        self.served_in_step = 0
        self._step_start: dict[str, Any] | None = None  # sampler state before the current step was drawn
        self.delivered: dict[str, int] = dict.fromkeys(sampler.parts, 0)  # this rank's blocks per domain

    def _draw_step(self) -> None:
        self._step_start = self.sampler.state_dict()
        draws = []
        for i in range(self.world_size * self.batch_size):
            d = self.sampler.next()
            if d is None:
                break
            draws.append((i, d))
        order = {d: k for k, d in enumerate(self.sampler.domains)}
        dealt = sorted(draws, key=lambda x: (order[x[1]], x[0]))
        start = self.step % self.world_size
        mine = [x for k, x in enumerate(dealt) if (k - start) % self.world_size == self.rank]
        self.pending = sorted(mine)
        self.served_in_step = 0

    def step_positions(self) -> list[int]:
        """Positions inside the current step of this rank's remaining draws (for tests and traces)."""
        return [i for i, _ in self.pending]

    def peek(self) -> str | None:
        """The domain of this rank's next block (None: every domain exhausted)."""
        if not self.pending:
            self._draw_step()
            if not self.pending:
                return None
        return self.pending[0][1]

    def served(self) -> None:
        """The block `peek()` named was delivered."""
        _, domain = self.pending.pop(0)
        self.delivered[domain] = self.delivered.get(domain, 0) + 1
        self.served_in_step += 1
        if not self.pending:
            self.step += 1
            self.served_in_step = 0
            self._step_start = None

    def exhaust(self, domain: str) -> None:
        """Renormalize: leave `domain` out from now on; this rank's pending draws of it are drawn again."""
        self.sampler.exhaust(domain)
        for k, (i, d) in enumerate(self.pending):
            if d == domain:
                new = self.sampler.next()
                self.pending[k] = (i, new) if new is not None else (i, "")
        self.pending = [x for x in self.pending if x[1]]

    def state_dict(self) -> dict[str, Any]:
        start = self._step_start if self.pending and self._step_start is not None else self.sampler.state_dict()
        return {"sampler": start, "step": self.step, "served": self.served_in_step, "delivered": dict(self.delivered)}

    def load_state_dict(self, state: Mapping[str, Any], *, same_layout: bool = True) -> bool:
        """Continue from `state`: exactly when it has these proportions and seed and this rank's layout (True).

        Under another layout (`same_layout` False) the rank starts a fresh step from the saved sampler state.
        """
        exact = self.sampler.load_state_dict(state["sampler"]) and same_layout
        self.pending, self._step_start, self.served_in_step = [], None, 0
        self.step = int(state.get("step", 0)) if exact else 0
        delivered = {d: int(c) for d, c in state.get("delivered", {}).items()} if same_layout else {}
        self.delivered = {**delivered, **{d: delivered.get(d, 0) for d in self.sampler.parts}}
        served = int(state.get("served", 0)) if exact else 0
        if served:
            self._draw_step()
            del self.pending[:served]
            self.served_in_step = served
        return exact
