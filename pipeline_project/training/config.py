"""The training configuration: `ModelPreset` (which model) and `TrainConfig` (every knob of the loop).

Pure pydantic, no torch: the Dagster side builds and validates these (inside a `JobConfig`) in the code
server, and the trainer process receives them as JSON. Every default of a training invocation is declared
here once; `resources/trainer.py` only overrides the fields it is given.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipeline_project.streaming.load.mixture import MixtureConfig
from pipeline_project.training.errors import PresetError

PRESET_VERSION = 1
TRAIN_CONFIG_VERSION = 1

PresetName = Literal["tiny", "small", "from_pretrained"]


class ModelPreset(BaseModel):
    """Which model to train. `overrides` patch individual DeepseekV3Config fields."""

    model_config = ConfigDict(extra="forbid")

    version: int = PRESET_VERSION
    name: PresetName = "tiny"
    pretrained: str | None = Field(default=None, description="local path or hub id for from_pretrained")
    overrides: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _pretrained_needs_path(self) -> ModelPreset:
        if self.name == "from_pretrained" and not self.pretrained:
            raise PresetError("preset 'from_pretrained' needs `pretrained` (a local path or hub id)")
        return self


class TrainConfig(BaseModel):
    """Every knob of a training invocation.

    The optimisation defaults (lr 3e-3 -> min_lr 3e-4, 10 warmup steps) suit the `tiny` preset, the one the
    Dagster layer and the demo train by default: its loss visibly falls within a few steps. Lower `lr` for
    the larger presets.
    """

    model_config = ConfigDict(extra="forbid")

    version: int = TRAIN_CONFIG_VERSION
    preset: ModelPreset = Field(default_factory=ModelPreset)
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 10
    decay_steps: int = 10_000  # cosine from lr to min_lr over global steps [warmup, decay); min_lr after
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    batch_size: int = 8  # sequences per rank per step
    max_steps: int | None = None  # steps in this invocation; None (or 0) = until the data ends
    grad_clip: float = 1.0
    seed: int = 0
    bias_update_speed: float = 1e-3  # DeepSeek-V3's gamma for the aux-loss-free balancing
    log_every: int = 1
    # Also checkpoint inside the loop every N global steps (None or 0: only at the end), so a crash loses at
    # most N steps. 100 keeps a checkpoint's cost (tiny: a few MB, ~1 s to S3) a small share of the steps it
    # protects (~10-30 s on a CPU) while bounding the loss to ~1-2 minutes of work; raise it for the larger
    # presets, whose weights + AdamW state take longer to upload (small: ~1.3 GB per checkpoint).
    checkpoint_every: int | None = 100
    # "cuda" refuses to start without a working GPU (`devices.require_cuda`); "auto" (local runs) falls back to CPU
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # "ddp": every rank holds the whole model and AdamW state (~16 bytes per parameter); "fsdp": PyTorch's FSDP2
    # shards them across the ranks and checkpoints them with torch.distributed.checkpoint (`training/sharding.py`).
    # One rank trains unsharded either way. A lineage may switch between the two at any checkpoint.
    parallelism: Literal["ddp", "fsdp"] = "ddp"
    # Draw blocks by domain at these proportions, e.g. {"proportions": {"en_web": 0.5, "zh_web": 0.3, "code": 0.15,
    # "books": 0.05}, "on_domain_exhausted": "wait"} (streaming/mixture.py). None: every block of the topic, in
    # the loader's interleave order, as without domains. May change between checkpoints (no block is replayed).
    mixture: MixtureConfig | None = None

    @field_validator("max_steps", "checkpoint_every")
    @classmethod
    def _zero_means_unbounded(cls, value: int | None) -> int | None:
        return value if value and value > 0 else None
