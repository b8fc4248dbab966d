from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pipeline_project.training.checkpoint.store import (
    ResumeState,
    capture_rng,
    load_resume_state,
    restore_rng,
    save_checkpoint,
)
from pipeline_project.training.presets import build_model
from pipeline_project.training.trainer import build_optimizer, train
from pipeline_project_tests.training.helpers import make_batches, tiny_config


def test_hf_checkpoint_reloads_and_generates(tmp_path, deepseek_tokenizer):
    torch.manual_seed(0)
    model = build_model("tiny", deepseek_tokenizer.vocab_size)
    cfg = tiny_config(max_steps=2)
    train(cfg, make_batches(2, vocab=deepseek_tokenizer.vocab_size), model=model, optimizer=build_optimizer(model, cfg))
    biases = torch.tensor([0.1, -0.2, 0.3, -0.2])
    model.model.layers[1].mlp.gate.e_score_correction_bias.copy_(biases)  # balancing state must survive

    save_checkpoint(
        tmp_path,
        model=model,
        tokenizer=deepseek_tokenizer,
        resume=ResumeState(step=2, tokens_seen=128, optimizer={}, data_states=[]),
    )
    hf_dir = tmp_path / "hf"
    assert (hf_dir / "model.safetensors").is_file() and (hf_dir / "tokenizer.json").is_file()

    reloaded = AutoModelForCausalLM.from_pretrained(hf_dir)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    assert type(reloaded).__name__ == "DeepseekV3ForCausalLM"
    assert torch.equal(reloaded.model.layers[1].mlp.gate.e_score_correction_bias, biases)
    inputs = tokenizer("The pipeline keeps the GPUs", return_tensors="pt")
    out = reloaded.generate(**inputs, max_new_tokens=5, do_sample=False, pad_token_id=deepseek_tokenizer.eos_id)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 5
    assert isinstance(tokenizer.decode(out[0]), str)


def test_resume_state_round_trip(tmp_path, tiny_model):
    cfg = tiny_config(max_steps=2)
    optimizer = build_optimizer(tiny_model, cfg)
    train(cfg, make_batches(2), model=tiny_model, optimizer=optimizer)
    data_states = [{"offsets": {"0": 10, "1": 7}}, {"offsets": {"2": 3}}]
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    rng = capture_rng()
    expected = (random.random(), np.random.rand(), torch.rand(3))
    save_checkpoint(
        tmp_path,
        model=tiny_model,
        tokenizer=None,
        resume=ResumeState(
            step=2,
            tokens_seen=128,
            optimizer=optimizer.state_dict(),
            data_states=data_states,
            rng=rng,
            meta={"tokenizer_hash": "abc"},
        ),
    )

    loaded = load_resume_state(tmp_path)
    assert (loaded.step, loaded.tokens_seen, loaded.data_states, loaded.meta) == (
        2,
        128,
        data_states,
        {"tokenizer_hash": "abc"},
    )
    original = optimizer.state_dict()
    assert loaded.optimizer["param_groups"] == original["param_groups"]
    for key, state in original["state"].items():
        assert torch.equal(loaded.optimizer["state"][key]["exp_avg"], state["exp_avg"])
    restore_rng(loaded.rng)
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(3), expected[2])
    readable = json.loads((tmp_path / "resume" / "data_state.json").read_text())
    assert readable == {"step": 2, "data_states": data_states}


def test_a_resume_state_from_s3_cannot_run_code(tmp_path):
    """state.pt is read with weights_only=True: a pickle that calls a function is refused, not executed."""
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (tmp_path / "resume").mkdir()
    torch.save(
        {"step": 1, "tokens_seen": 0, "optimizer": Payload(), "data_states": []}, tmp_path / "resume" / "state.pt"
    )
    with pytest.raises(pickle.UnpicklingError):
        load_resume_state(tmp_path)
    assert not marker.exists()


def test_the_saved_resume_state_holds_only_tensors_and_plain_values(tmp_path, tiny_model):
    cfg = tiny_config(max_steps=1)
    optimizer = build_optimizer(tiny_model, cfg)
    train(cfg, make_batches(1), model=tiny_model, optimizer=optimizer)
    resume = ResumeState(step=1, tokens_seen=64, optimizer=optimizer.state_dict(), data_states=[], rng=capture_rng())
    save_checkpoint(tmp_path, model=tiny_model, tokenizer=None, resume=resume)
    state = torch.load(tmp_path / "resume" / "state.pt", weights_only=True)  # no allowlist needed
    assert state["step"] == 1 and isinstance(state["rng"]["numpy"]["key"], list)
