"""Run by torchrun in test_step_log_ddp.py: two gloo ranks train on a tracing stand-in loader, each wrapped in a
`StepLog`; every checkpoint gathers the ranks' steps (`gather_steps`) and rank 0 writes them (`write_steps`)."""

import sys
from pathlib import Path

from pipeline_project.training import distributed
from pipeline_project.training.presets import build_model
from pipeline_project.training.step_log import StepLog, gather_steps, write_steps
from pipeline_project.training.trainer import build_optimizer, seed_everything, train
from pipeline_project_tests.training.helpers import SMALL_VOCAB, make_batches, tiny_config


def traces(rank: int, n: int) -> list[list[tuple[int, int, int]]]:
    """(partition, offset, block) of each batch's two blocks: rank r reads partitions r and r + 2; a batch's blocks
    come from one message, or straddle two (batch 1), or two partitions (batch 3)."""
    p, q = rank, rank + 2
    plans = [[(p, 0, 0), (p, 0, 1)], [(p, 0, 2), (p, 7, 0)], [(p, 7, 1), (p, 7, 2)], [(p, 7, 3), (q, 4, 0)]]
    plans.append([(q, 4, 1), (q, 4, 2)])
    return plans[:n]


class TracingLoader:
    def __init__(self, batches, trace_plan):
        self.batches, self.plan, self.trace = batches, trace_plan, []

    def __iter__(self):
        for batch, entries in zip(self.batches, self.plan, strict=True):
            self.trace.extend(entries)
            yield batch


def main() -> None:
    info = distributed.init_distributed()
    out = Path(sys.argv[1])
    cfg = tiny_config(checkpoint_every=3)
    seed_everything(cfg.seed)
    model = build_model("tiny", SMALL_VOCAB)
    n = 5 - info.rank  # rank 1 runs dry first: rank 0's fifth batch is fetched, never trained
    log = StepLog(TracingLoader(make_batches(n, seed=100 + info.rank), traces(info.rank, n)), start_step=0)

    def save(step: int) -> None:
        ranks = gather_steps(log, step)
        if info.is_main:
            write_steps(out / f"step-{step}", ranks, step=step, previous=None, topic="t", seq_len=32, batch_size=2)

    result = train(cfg, log, model=model, optimizer=build_optimizer(model, cfg), on_checkpoint=lambda s, _: save(s))
    if result.end_step % cfg.checkpoint_every:
        save(result.end_step)  # the final checkpoint, as training/run/saving.py's save_final
    distributed.destroy()


if __name__ == "__main__":
    main()
