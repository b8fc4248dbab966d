"""A checkpoint's `hf/` folder as an MLflow model, in place: the registry's version loads with MLflow's own loaders.

`write_mlflow_model` writes an `MLmodel` file into `hf/` with the `transformers` flavour pointing at the folder
itself (`model_binary: .`: `config.json` and `model.safetensors` are read where `save_pretrained` wrote them, no
second copy of the weights) and the `python_function` flavour (loader `mlflow.transformers`, text generation).
MLflow reads a pipeline's tokenizer only from `components/tokenizer/`, so the tokenizer files are written there
too (the DeepSeek tokenizer: about 10 MB and 1 s per checkpoint); `hf/` keeps its own copy for `from_pretrained(hf/)`.

A model version whose source is `s3://.../step-<n>-<id>/hf/` then loads with

    mlflow.transformers.load_model("models:/<lineage>@latest-checkpoint")   # a transformers pipeline
    mlflow.pyfunc.load_model("models:/<lineage>@latest-checkpoint").predict(["The data pipeline"])
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MLMODEL_FILE = "MLmodel"
TOKENIZER_COMPONENT_DIR = "components/tokenizer"
TASK = "text-generation"
DEFAULT_NEW_TOKENS = 32


def _signature():
    from mlflow.models.signature import ModelSignature
    from mlflow.types.schema import ColSpec, ParamSchema, ParamSpec, Schema

    return ModelSignature(
        inputs=Schema([ColSpec("string")]),
        outputs=Schema([ColSpec("string")]),
        params=ParamSchema(
            [ParamSpec("max_new_tokens", "long", DEFAULT_NEW_TOKENS), ParamSpec("do_sample", "boolean", False)]
        ),
    )


def transformers_flavor(hf_dir: Path, tokenizer_type: str | None) -> dict[str, Any]:
    """The `transformers` flavour of `hf_dir` (keys as `mlflow.transformers.save_model` writes them)."""
    import transformers

    architecture = json.loads((hf_dir / "config.json").read_text())["architectures"][0]
    flavor: dict[str, Any] = {
        "transformers_version": transformers.__version__,
        "code": None,
        "task": TASK,
        "instance_type": "TextGenerationPipeline",
        "pipeline_model_type": architecture,
        "source_model_name": architecture,
        "model_binary": ".",
        "components": ["tokenizer"] if tokenizer_type else [],
    }
    if tokenizer_type:
        flavor["tokenizer_type"] = tokenizer_type
    return flavor


def write_mlflow_model(hf_dir: str | Path, tokenizer: Any | None) -> Path:
    """Write `MLmodel` (and the tokenizer component, when there is a tokenizer) into `hf_dir`, which already holds
    the model `save_pretrained` wrote. Without a tokenizer only `load_model(..., return_type="components")` works."""
    from mlflow import pyfunc
    from mlflow.models import Model

    hf_dir = Path(hf_dir)
    tokenizer_type = None
    if tokenizer is not None:
        tokenizer.save(hf_dir / TOKENIZER_COMPONENT_DIR)
        tokenizer_type = type(getattr(tokenizer, "tokenizer", tokenizer)).__name__
    model = Model(signature=_signature())
    model.add_flavor("transformers", **transformers_flavor(hf_dir, tokenizer_type))
    if tokenizer_type:
        pyfunc.add_to_model(model, loader_module="mlflow.transformers")
    model.save(str(hf_dir / MLMODEL_FILE))
    return hf_dir / MLMODEL_FILE
