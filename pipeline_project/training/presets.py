"""DeepseekV3 (MLA + MoE) model presets.

`tiny` trains a few steps in seconds on a CPU (tests); `small` is ~100M parameters for one GPU;
`from_pretrained` continues pre-training from a local path or hub id. The `ModelPreset` config itself
lives in `pipeline_project.training.config` (torch-free) and is re-exported here. A preset that cannot be built raises
`PresetError` (a `ValueError`).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

from pipeline_project.training.config import PRESET_VERSION, ModelPreset
from pipeline_project.training.errors import PresetError

__all__ = [
    "PRESET_ARCHITECTURES",
    "PRESET_VERSION",
    "ModelPreset",
    "assert_vocab_fits",
    "build_config",
    "build_model",
    "count_parameters",
]

# Architecture hyper-parameters per preset; vocab_size comes from the tokenizer.
PRESET_ARCHITECTURES: dict[str, dict[str, Any]] = {
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        first_k_dense_replace=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=32,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=8,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
    ),
    # ~100M parameters with the 129,280-token DeepSeek vocabulary: tied input/output embeddings
    # (66M) keep the budget for 8 transformer layers with 8 routed experts.
    "small": dict(
        hidden_size=512,
        intermediate_size=1536,
        moe_intermediate_size=256,
        num_hidden_layers=8,
        first_k_dense_replace=1,
        num_attention_heads=8,
        num_key_value_heads=8,
        q_lora_rank=192,
        kv_lora_rank=128,
        qk_rope_head_dim=32,
        qk_nope_head_dim=32,
        v_head_dim=64,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    ),
}


def build_config(preset: ModelPreset | str, vocab_size: int) -> DeepseekV3Config:
    """A DeepseekV3Config for `preset` whose embedding table holds `vocab_size` tokens."""
    preset = ModelPreset(name=preset) if isinstance(preset, str) else preset
    if preset.name == "from_pretrained":
        config = AutoConfig.from_pretrained(preset.pretrained)
        if not isinstance(config, DeepseekV3Config):
            raise PresetError(f"{preset.pretrained} is a {type(config).__name__}, not a DeepseekV3Config")
        for key, value in preset.overrides.items():
            setattr(config, key, value)
    else:
        kwargs = {**PRESET_ARCHITECTURES[preset.name], **preset.overrides}
        # No multi-token-prediction head is trained here, so none is declared.
        config = DeepseekV3Config(vocab_size=vocab_size, num_mtp_layers=0, use_cache=True, **kwargs)
    assert_vocab_fits(config, vocab_size)
    return config


def assert_vocab_fits(config: DeepseekV3Config, vocab_size: int) -> None:
    if vocab_size > config.vocab_size:
        raise PresetError(
            f"tokenizer vocabulary ({vocab_size}) does not fit the model's embedding table ({config.vocab_size})"
        )


def build_model(preset: ModelPreset | str, vocab_size: int) -> DeepseekV3ForCausalLM:
    """A freshly initialised model, or the pretrained weights for `from_pretrained` (fp32 master weights)."""
    preset = ModelPreset(name=preset) if isinstance(preset, str) else preset
    config = build_config(preset, vocab_size)
    if preset.name == "from_pretrained":
        return AutoModelForCausalLM.from_pretrained(preset.pretrained, config=config, dtype=torch.float32)
    return DeepseekV3ForCausalLM(config)


def count_parameters(config: DeepseekV3Config) -> dict[str, int]:
    """Parameter counts of a model built from `config`, without allocating it (meta device)."""
    with torch.device("meta"):
        model = DeepseekV3ForCausalLM(config)
    total = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    embedding = model.get_input_embeddings().weight.numel()
    if not config.tie_word_embeddings:
        embedding += model.get_output_embeddings().weight.numel()
    experts = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    return {"total": total, "embedding": embedding, "non_embedding": total - embedding, "routed_experts": experts}
