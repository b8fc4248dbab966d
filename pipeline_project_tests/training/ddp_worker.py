"""Run by torchrun in test_ddp.py: two gloo ranks train the tiny model on disjoint in-memory batches."""

import json
import sys

from pipeline_project.training import distributed
from pipeline_project.training.presets import build_model
from pipeline_project.training.trainer import build_optimizer, seed_everything, train
from pipeline_project_tests.training.helpers import SMALL_VOCAB, make_batches, tiny_config

info = distributed.init_distributed()
cfg = tiny_config()
seed_everything(cfg.seed)
model = build_model("tiny", SMALL_VOCAB)
# rank 1 has one batch fewer: the loop must stop together at the shorter stream
batches = make_batches(5 - info.rank, seed=100 + info.rank)
consumed = {"n": 0}


def stream():
    for b in batches:
        consumed["n"] += 1
        yield b


result = train(cfg, stream(), model=model, optimizer=build_optimizer(model, cfg), data_state_fn=lambda: consumed["n"])
digest = sum(float(p.double().sum()) for p in model.parameters())
bias = model.model.layers[1].mlp.gate.e_score_correction_bias.tolist()
out = {
    "rank": info.rank,
    "steps": result.steps,
    "losses": result.losses,
    "digest": digest,
    "bias": bias,
    "data_state": result.data_state,
    "tokens": result.tokens,
}
with open(f"{sys.argv[1]}/rank{info.rank}.json", "w") as f:
    json.dump(out, f)
distributed.destroy()
