"""The domain-mixture block source of `KafkaBlockLoader`: blocks drawn by domain at configured proportions.

    loader = make_loader(LoaderConfig(..., mixture=MixtureConfig(proportions={"en_web": 0.7, "code": 0.3})))

How it reads: every domain of the mixture is its own block stream over this rank's partitions, with its own
consumers (`PartitionReader(domain=...)`, which keep that domain's messages by their `domain` header and pass
over the others), its own seeded interleave and its own cursors. `RankMixture` (`mixture.py`) names the domain
of every block of the batch; that domain's stream delivers its next block. So the per-domain cursors are exact
positions, each stream seeks straight to its own on resume, and nothing is buffered beyond the readers'
bounded buffers, whatever the proportions and however the domains are spread over the partitions. The price:
each domain's consumers fetch the whole of the rank's partitions (read amplification = number of domains).

State (`state_dict()`): the plain loader's fields, with `partitions` the low watermark (per partition the
lowest domain cursor: everything before it is consumed or of no mixture domain), and `mixture` holding the
config, the rank's sampler state and every domain's cursors, current partition and interleave state. Resume:

* same proportions, seed and layout: the identical block sequence;
* other proportions (changed between checkpoints): every domain continues at its own cursors, so no block
  is replayed or skipped; the new proportions hold from the first new draw on (`MixtureSampler`);
* a domain new to the mixture starts at the low watermark; a domain left out keeps its saved cursors in
  the state (`retired`), so adding it back later skips nothing either;
* a plain (no-mixture) state: every domain starts at its cursors;
* another world size, worker count or partition count: every domain's positions merged over the ranks
  (`merge_mixture_states`, the union of `stripes.py`), and the sampler continues its global sequence.

A plain loader given a mixture state resumes at the low watermark: the blocks of the domains that were
ahead of it are read again (switching the mixture off is the one change that replays).

Events: every domain that runs dry is recorded in `loader.mixture_events` (domain, policy, rank, the global
draws so far) when the batch or the end it came with is delivered; `metrics()["mixture"]` has the realized
and target proportions. Blocks of domains outside the mixture are never drawn; the primary domain's readers
count what they fetched of them (`outside_blocks`, approximate: counted at fetch time).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pipeline_project.streaming.load.assembler import Batch, BatchAssembler, End, Stream
from pipeline_project.streaming.load.block_source import SeekPlan, SourceContext
from pipeline_project.streaming.load.config import LoaderConfig
from pipeline_project.streaming.load.loader import KafkaBlockLoader
from pipeline_project.streaming.load.mixture import MixtureSampler, RankMixture
from pipeline_project.streaming.load.partition_reader import PartitionReader
from pipeline_project.streaming.load.state import Cursor, Interleaver, merge_positions, merge_states, position_entries
from pipeline_project.streaming.load.stripes import Skips

log = logging.getLogger(__name__)


def make_loader(cfg: LoaderConfig) -> KafkaBlockLoader:
    """The loader with the plain interleave, or with the domain mixture (`DomainMixture`) when `cfg.mixture` is set."""
    return MixtureBlockLoader(cfg) if cfg.mixture is not None else KafkaBlockLoader(cfg)


@dataclass(frozen=True)
class DomainExhausted:
    domain: str
    policy: str
    rank: int
    draws: int  # global draws since the proportions were set, when it ran dry
    delivered: int  # blocks this rank had delivered
    at: float


def domain_seed(seed: int, domain: str) -> int:
    return seed * 1_000_003 + zlib.crc32(domain.encode())


def _cursors_of(partitions: Mapping[str, Any]) -> dict[int, Cursor]:
    return {int(p): Cursor(int(c["offset"]), int(c.get("block", 0))) for p, c in partitions.items()}


def _order(c: Cursor) -> tuple[int, int]:
    return (c.offset, c.block)


def merge_mixture_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`state.merge_states` (low watermarks), plus every domain's cursors merged over the ranks' states.

    The sampler state is rank 0's (every rank's is the same at batch boundaries unless a domain was
    renormalized away on one rank only); the merged position restarts at a step boundary.
    """
    merged = merge_states(states)
    mixtures = [s["mixture"] for s in sorted(states, key=lambda s: s.get("rank") or 0) if s.get("mixture")]
    if not mixtures:
        return merged
    active = {d for m in mixtures for d in m["domains"]}
    per_domain: dict[str, list[Mapping[str, Any]]] = {}
    for m in mixtures:
        for d, saved in {**m.get("retired", {}), **m["domains"]}.items():
            per_domain.setdefault(d, []).append(saved["partitions"])
    count = merged["topic_partitions"]
    domains = {
        d: {"partitions": merge_positions(ps, count if d in active else None), "current": None, "interleave": None}
        for d, ps in per_domain.items()
    }
    rank = dict(mixtures[0]["rank"], pos=0, delivered={})
    merged["mixture"] = {"config": mixtures[0]["config"], "rank": rank, "domains": domains, "retired": {}}
    return merged


class MixtureAssembler(BatchAssembler):
    def run_mixture(
        self, mix: RankMixture, streams: Mapping[str, Stream], policy: str, budget: int | None, snapshot: Any
    ) -> Iterator[Batch | End]:
        """Batches whose every row is drawn by `mix` from the stream of its domain."""
        while not self.stop.is_set():
            acc = self._new_batch(budget)
            events: list[DomainExhausted] = []
            while acc.fill < self.batch_size:
                domain = mix.peek()
                if domain is None:  # renormalize left no domain
                    yield End(snapshot() if acc.fill == 0 else None, acc.letters, acc.skipped, events)
                    return
                n = self.take(streams[domain], acc, 1)
                if n is None:
                    return
                if n == 1:
                    mix.served()
                    if acc.trace is not None:
                        acc.trace[-1] = (*acc.trace[-1], domain)
                    continue
                if not events or events[-1].domain != domain:
                    events.append(self._event(mix, domain, policy))
                if policy == "renormalize":
                    mix.exhaust(domain)
                    continue
                if policy == "wait" and self.end_offsets is None:
                    continue  # streaming: keep waiting for this domain's next block
                yield End(snapshot() if acc.fill == 0 else None, acc.letters, acc.skipped, events)
                return
            if budget is not None:
                budget -= len(acc.letters)
            yield Batch(acc.out, snapshot(), acc.trace, acc.pad, acc.letters, acc.skipped, events, acc.retracted)

    def _event(self, mix: RankMixture, domain: str, policy: str) -> DomainExhausted:
        draws = sum(mix.sampler.since_change.values())
        return DomainExhausted(domain, policy, mix.rank, draws, sum(mix.delivered.values()), time.time())


class DomainMixture:
    """The block source (`block_source.BlockSource`) whose batches follow `cfg.mixture`; see the module docstring."""

    thread_name = "kafka-mixture-prefetch"

    def __init__(self, ctx: SourceContext):
        cfg = ctx.cfg
        if cfg.mixture is None:
            raise ValueError("DomainMixture needs LoaderConfig.mixture")
        self.ctx = ctx
        self.mixture = cfg.mixture
        self.domains = tuple(cfg.mixture.proportions)
        self.events: list[DomainExhausted] = []
        self.retired: dict[str, Any] = {}  # saved domain positions of domains no longer in the mixture
        self.domain_skips: dict[str, dict[int, Skips]] = {}  # per domain: stripes.Skips of an earlier layout
        self.readers: list[PartitionReader] = []
        self.streams: dict[str, Stream] = {}
        for i, d in enumerate(self.domains):
            readers = [self._domain_reader(d, w, ps, primary=i == 0) for w, ps in ctx.workers.items()]
            self.readers.extend(readers)
            self.streams[d] = Stream(readers, self._domain_interleaver(d), dict(ctx.start_cursors), None, set())
        self.mix = self._new_mix()
        self.assembler = ctx.assembler(self.readers, lambda cursors, current: self.snapshot(), MixtureAssembler)

    def _domain_reader(self, domain: str, worker: int, partitions: Sequence[int], *, primary: bool) -> PartitionReader:
        return self.ctx.reader(
            worker,
            partitions,
            suffix=f".{domain}",
            domain=domain,
            primary=primary,
            known_domains=frozenset(self.domains),
        )

    def _domain_interleaver(self, domain: str) -> Interleaver:
        cfg = self.ctx.cfg
        return Interleaver(self.ctx.workers, seed=domain_seed(cfg.seed, domain), rank=cfg.rank)

    def _new_mix(self) -> RankMixture:
        cfg = self.ctx.cfg
        sampler = MixtureSampler(cfg.mixture.proportions, seed=cfg.seed)
        return RankMixture(sampler, rank=cfg.rank, world_size=cfg.world_size, batch_size=cfg.batch_size)

    # -- state --------------------------------------------------------------------------------

    def merge(self, states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return merge_mixture_states(states)

    def snapshot(self) -> dict[str, Any]:
        ctx = self.ctx
        low = {p: min((s.cursors[p] for s in self.streams.values()), key=_order) for p in ctx.partitions}
        first = next(iter(self.streams.values()))
        state = ctx.state({p: Cursor(c.offset, c.block) for p, c in low.items()}, None, first.il.get_state(), None)
        domains = {
            d: {
                "partitions": position_entries(s.cursors, ctx.shares, self.domain_skips.get(d)),
                "current": s.current,
                "interleave": s.il.get_state(),
            }
            for d, s in self.streams.items()
        }
        state["mixture"] = {
            "config": self.mixture.model_dump(mode="json"),
            "rank": self.mix.state_dict(),
            "domains": domains,
            "retired": dict(self.retired),
        }
        return state

    def restore(self, state: Mapping[str, Any]) -> None:
        """Rewind the streams and the mixture to a snapshot this source took."""
        mixture = state["mixture"]
        for d, s in self.streams.items():
            saved = mixture["domains"][d]
            s.cursors = _cursors_of(saved["partitions"])
            s.current = saved["current"]
            s.il.set_state(saved["interleave"])
        self.mix.load_state_dict(mixture["rank"])

    def plan_seek(self, state: Mapping[str, Any], own: bool, bounds: Any) -> SeekPlan:
        """Every domain's starts: its saved cursors, else (new domain, plain state) the state's low watermark."""
        mixture = state.get("mixture") or {}
        # a domain back from retirement resumes at its own cursors, as an active one does
        saved_domains = {**(mixture.get("retired") or {}), **(mixture.get("domains") or {})}
        starts = {}
        for d in self.streams:
            saved = saved_domains.get(d)
            starts[d] = self.ctx.checked_starts(saved["partitions"] if saved else state["partitions"], own, bounds)
        return SeekPlan(state, own, starts)

    def seek(self, plan: SeekPlan) -> None:
        """Seek every domain stream to its planned start; see the module docstring for what may change."""
        mixture = plan.state.get("mixture") or {}
        saved_domains = {**(mixture.get("retired") or {}), **(mixture.get("domains") or {})}
        self.domain_skips = {}
        for d, s in self.streams.items():
            saved = saved_domains.pop(d, None)
            s.cursors, self.domain_skips[d], skipped = plan.starts[d]
            if saved and plan.own and saved.get("interleave") is not None:
                s.il.set_state(saved["interleave"])
                s.current = None if any(x.partition == saved["current"] for x in skipped) else saved["current"]
            else:
                s.il, s.current = self._domain_interleaver(d), None
        self.retired = saved_domains  # what is left: the domains this mixture leaves out, at their cursors
        self.mix = self._new_mix()
        if mixture.get("rank"):
            exact = self.mix.load_state_dict(mixture["rank"], same_layout=plan.own)
            if not exact:
                log.info(
                    "mixture proportions, seed or layout changed since the checkpoint (%s -> %s): each domain "
                    "continues at its own cursors, the new proportions hold from here",
                    mixture.get("config", {}).get("proportions"),
                    self.mixture.proportions,
                )

    # -- running ------------------------------------------------------------------------------

    def start(self, budget: int) -> Iterator[Batch | End]:
        for d, s in self.streams.items():
            s.live = self.ctx.live(s.cursors)
            skips = self.domain_skips.get(d)
            for r in s.readers:
                r.open({p: s.cursors[p].offset for p in r.partitions if p in s.live}, skips)
        policy = self.mixture.on_domain_exhausted
        return self.assembler.run_mixture(self.mix, self.streams, policy, budget, self.snapshot)

    def account(self, item: Batch | End) -> None:
        for event in item.events:
            log.warning(
                "mixture: domain %r ran dry on rank %d after %d draws (on_domain_exhausted=%s)",
                event.domain,
                event.rank,
                event.draws,
                event.policy,
            )
            self.events.append(event)

    def metrics(self) -> dict[str, Any]:
        return {"mixture": self.figures()}

    def figures(self) -> dict[str, Any]:
        """Target and realized shares (global sequence), this rank's delivered blocks, dry events, outside blocks."""
        sampler = self.mix.sampler
        outside: dict[str, int] = {}
        for r in self.readers:
            for d, n in r.outside_blocks.items():
                outside[d] = outside.get(d, 0) + n
        return {
            "target": sampler.target(),
            "realized": sampler.realized(),
            "delivered": dict(self.mix.delivered),
            "exhausted": sorted({e.domain for e in self.events}),
            "events": [asdict(e) for e in self.events],
            "outside_blocks": outside,
        }


class MixtureBlockLoader(KafkaBlockLoader):
    """A `KafkaBlockLoader` whose block source is `DomainMixture`, with the mixture's figures as public views."""

    def __init__(self, cfg: LoaderConfig):
        if cfg.mixture is None:
            raise ValueError("MixtureBlockLoader needs LoaderConfig.mixture")
        super().__init__(cfg, source=DomainMixture)

    @property
    def mixture_events(self) -> list[DomainExhausted]:
        return self.source.events

    def mixture_figures(self) -> dict[str, Any]:
        return self.source.figures()
