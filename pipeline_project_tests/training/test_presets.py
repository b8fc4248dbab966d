from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from transformers import DeepseekV3ForCausalLM

from pipeline_project.training.presets import ModelPreset, build_config, build_model, count_parameters


def test_tiny_forward_backward_with_real_vocabulary(deepseek_tokenizer):
    config = build_config("tiny", deepseek_tokenizer.vocab_size)
    assert config.vocab_size >= deepseek_tokenizer.vocab_size
    assert config.first_k_dense_replace == 1 and config.n_routed_experts == 4 and config.num_experts_per_tok == 2
    torch.manual_seed(0)
    model = DeepseekV3ForCausalLM(config)
    ids = torch.randint(0, deepseek_tokenizer.vocab_size, (2, 16))
    out = model(input_ids=ids, labels=ids, use_cache=False)
    assert out.logits.shape == (2, 16, config.vocab_size)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    router = model.model.layers[1].mlp.gate
    assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0
    assert model.model.layers[1].mlp.experts.gate_up_proj.grad.abs().sum() > 0
    assert model.model.layers[0].self_attn.kv_a_proj_with_mqa.weight.grad.abs().sum() > 0


def test_small_preset_is_about_100m_parameters(deepseek_tokenizer):
    counts = count_parameters(build_config("small", deepseek_tokenizer.vocab_size))
    print(f"small preset parameters: {counts}")
    assert 90e6 <= counts["total"] <= 110e6
    assert counts["routed_experts"] > 0 and counts["non_embedding"] > 20e6


def test_vocabulary_must_fit(tmp_path):
    build_model(ModelPreset(name="tiny"), 512).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="does not fit"):
        build_config(ModelPreset(name="from_pretrained", pretrained=str(tmp_path)), 129_280)


def test_from_pretrained_loads_the_saved_weights(tmp_path):
    torch.manual_seed(3)
    original = build_model("tiny", 512)
    original.save_pretrained(tmp_path)
    loaded = build_model(ModelPreset(name="from_pretrained", pretrained=str(tmp_path)), 500)
    for (name, a), (_, b) in zip(original.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name


def test_overrides_and_validation():
    assert build_config(ModelPreset(name="tiny", overrides={"num_hidden_layers": 3}), 512).num_hidden_layers == 3
    with pytest.raises(ValidationError):
        ModelPreset(name="from_pretrained")
    with pytest.raises(ValidationError):
        ModelPreset(name="huge")
