from __future__ import annotations

import torch

from pipeline_project.training.balancing import ExpertBalancer
from pipeline_project_tests.training.helpers import SMALL_VOCAB


def _skew_router(model, ids: torch.Tensor) -> torch.nn.Module:
    """Random router weights plus a pull toward the mean token: expert 0 gets far more than its share."""
    router = model.model.layers[1].mlp.gate
    captured = {}
    hook = router.register_forward_pre_hook(lambda _m, inputs: captured.setdefault("h", inputs[0].reshape(-1, 64)))
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)
        hook.remove()
        mean = captured["h"].mean(0)
        router.weight.normal_(0, 0.3, generator=torch.Generator().manual_seed(0))
        router.weight[0] += 2 * mean / mean.norm()
    return router


def test_bias_update_moves_toward_balance(tiny_model):
    ids = torch.randint(0, SMALL_VOCAB, (4, 32), generator=torch.Generator().manual_seed(0))
    tiny_model.train()
    router = _skew_router(tiny_model, ids)
    balancer = ExpertBalancer(tiny_model, speed=0.01)
    loads = []
    with torch.no_grad():
        for _ in range(30):
            tiny_model(input_ids=ids, use_cache=False)
            loads.append(balancer.step())
    balancer.close()
    assert loads[0].counts["layer1"][0] == max(loads[0].counts["layer1"])
    assert loads[0].max_violation > 0.25, loads[0]
    assert max(load.max_violation for load in loads[-5:]) < loads[0].max_violation / 4, [x.max_violation for x in loads]
    bias = router.e_score_correction_bias
    assert bias[0] < 0 and bias[0] == bias.min(), bias  # the overloaded expert became less attractive


def test_counts_every_topk_selection_in_training_only(tiny_model):
    balancer = ExpertBalancer(tiny_model, speed=0.01)
    ids = torch.randint(0, SMALL_VOCAB, (2, 8))
    tiny_model.eval()
    with torch.no_grad():
        tiny_model(input_ids=ids, use_cache=False)
    assert balancer.step().counts == {"layer1": [0, 0, 0, 0]}
    bias_after_eval = tiny_model.model.layers[1].mlp.gate.e_score_correction_bias.clone()
    tiny_model.train()
    with torch.no_grad():
        tiny_model(input_ids=ids, use_cache=False)
    load = balancer.step()
    assert sum(load.counts["layer1"]) == 2 * 8 * 2  # tokens x top-2
    metrics = load.as_metrics()
    assert abs(sum(metrics[f"expert_load/layer1/e{i}"] for i in range(4)) - 1.0) < 1e-9
    assert not torch.equal(bias_after_eval, tiny_model.model.layers[1].mlp.gate.e_score_correction_bias)
    balancer.close()
    assert not tiny_model.model.layers[1].mlp.gate._forward_hooks
