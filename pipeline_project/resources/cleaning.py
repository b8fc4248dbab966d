"""The cleaning configuration as a resource, so a deployment can change it without code."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg


class CleaningResource(dg.ConfigurableResource):
    """`config_path` names a JSON file of `CleaningConfig` fields; unset means the versioned defaults."""

    config_path: str | None = None

    def config(self):
        from pipeline_project.cleaning import CleaningConfig

        overrides = json.loads(Path(self.config_path).read_text()) if self.config_path else {}
        return CleaningConfig.model_validate(overrides)
