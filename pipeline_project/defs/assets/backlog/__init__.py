"""The untrained backlog (`count`) and where it is kept between counts (`store`)."""

from pipeline_project.defs.assets.backlog.count import (
    CHECKPOINT_KEY,
    TOKEN_BLOCKS_KEY,
    Backlog,
    BacklogState,
    HeadSource,
    default_store,
    load_training_state,
    newest_head,
    save_training_state,
    untrained_backlog,
)
from pipeline_project.defs.assets.backlog.store import BacklogStore, Head, open_store

__all__ = [
    "CHECKPOINT_KEY",
    "TOKEN_BLOCKS_KEY",
    "Backlog",
    "BacklogState",
    "BacklogStore",
    "Head",
    "HeadSource",
    "default_store",
    "load_training_state",
    "newest_head",
    "open_store",
    "save_training_state",
    "untrained_backlog",
]
