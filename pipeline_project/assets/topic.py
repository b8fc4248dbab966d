"""Transitional alias (removed once every importer uses `assets.token_blocks`)."""

from pipeline_project.assets.token_blocks import token_blocks as kafka_topic

__all__ = ["kafka_topic"]
