"""DeepSeek pre-training, plain Python (no Dagster; only the `dagster_pipes` client in `reporting`).

Torch-free, safe to import in the code server: `config` (TrainConfig, ModelPreset), `job` (JobConfig,
TrainJobResult: the hand-off with the Dagster layer), `positions` (Kafka offsets from loader states),
`errors` (every error subclasses `TrainingError`), `mlflow_logging` (needs mlflow), `checkpoint_ref` and
`lineages` (checkpoint references in S3, the lineages, pulling one checkpoint).
The trainer process: `entrypoint` (the CLI) -> `run` (one invocation) -> `resume`, `trainer` (the loop),
`balancing`, `presets`, `checkpoint` (with `mlflow_model`: `hf/` as an MLflow model), `distributed`, `reporting`;
`verify` reloads a saved checkpoint.
Import the submodules directly; this package imports nothing.
"""
