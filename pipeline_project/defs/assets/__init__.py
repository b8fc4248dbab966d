"""The four assets and their checks. The checks of the partitioned assets are partitioned too, which Dagster 1.13
calls a preview feature and warns about at every definitions load (code server, run workers, the demo): the
project relies on it knowingly, so that one warning is silenced here, before any asset module defines a check."""

import warnings

import dagster as dg

warnings.filterwarnings(
    "ignore",
    message="Specifying a partitions_def on an AssetCheckSpec is currently in preview",
    category=dg.PreviewWarning,
)
