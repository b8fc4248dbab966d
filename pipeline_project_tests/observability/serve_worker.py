"""A stand-in trainer rank for the Prometheus test: serves /metrics and records a step every 0.2 s.

`python -m pipeline_project_tests.observability.serve_worker PORT`; runs until killed (at most 10 minutes).
"""

from __future__ import annotations

import sys
import time

from pipeline_project.common.metrics import prometheus as metrics
from pipeline_project.training.balancing import ExpertLoad
from pipeline_project.training.trainer import StepMetrics


def main(port: int) -> None:
    assert metrics.serve_metrics(port) == port
    print("serving", flush=True)
    deadline = time.monotonic() + 600
    step, delivered = 0, 0
    while time.monotonic() < deadline:
        step += 1
        delivered += 4096
        metrics.record_train_step(
            StepMetrics(
                step=step, loss=8.0 / step, lr=1e-3, grad_norm=1.0, tokens=4096, tokens_seen=4096 * step,
                tokens_per_s=20_000.0, step_time_s=0.2, data_wait_s=0.02, data_wait_fraction=0.1, consumer_lag=7.0,
                expert_load=ExpertLoad(counts={"layer1": [30, 10, 20, 40]}),
            )
        )  # fmt: skip
        metrics.record_loader(
            {"lag": {0: 3, 1: 4}, "data_wait_fraction": 0.1, "tokens_delivered": delivered, "dead_letters": 0},
            topic="token-blocks",
        )
        time.sleep(0.2)


if __name__ == "__main__":
    main(int(sys.argv[1]))
