"""Check that a checkpoint in S3 is usable: download its HF folder, reload it, generate a few tokens.

Used by the blocking `checkpoint_reloads` asset check; a URI that is not `s3://...` raises `InvalidS3UriError`.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pipeline_project.common.s3 import split_s3_uri
from pipeline_project.training.checkpoint.store import HF_DIR, download_prefix

PROMPT = "The data pipeline"


def reload_and_generate(s3, uri: str, directory: str | Path, new_tokens: int = 4) -> list[int]:
    """Download `uri` (a checkpoint's step folder or its `hf/` folder), load it with
    `AutoModelForCausalLM.from_pretrained` and greedily generate `new_tokens` token ids."""
    bucket, key = split_s3_uri(uri)
    key = key.rstrip("/")
    if not key.endswith(f"/{HF_DIR}"):
        key = f"{key}/{HF_DIR}"
    hf_dir = download_prefix(s3, bucket, key, Path(directory) / HF_DIR)
    model = AutoModelForCausalLM.from_pretrained(hf_dir)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    inputs = tokenizer(PROMPT, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(
            **inputs,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.eos_token_id,
        )
    return out[0, inputs["input_ids"].shape[1] :].tolist()
