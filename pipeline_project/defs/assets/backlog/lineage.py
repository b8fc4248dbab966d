"""The lineage's own newest checkpoint as the backlog's head: after `pipeline-project checkpoint rewind --step N`
the newest checkpoint materialization still names the rewound checkpoint (and its data position), but latest.json
names step N, which the next training run continues from. Counting against the materialization would take the
rewound batches for trained, and the trigger would never ask for them again (issue 40, section 2).

`lineage_head` reads latest.json (one small GET a count) and, when it names another checkpoint than the newest
materialization ended at or resumed from, that checkpoint's saved data position (`resume/data_state.json`)."""

from __future__ import annotations

import hashlib

from pipeline_project.defs.assets.backlog.count import HeadSource
from pipeline_project.defs.assets.backlog.store import Head
from pipeline_project.training.checkpoint.lineages import saved_position
from pipeline_project.training.checkpoint.ref import read_latest


def lineage_head(s3, bucket: str, prefix: str) -> HeadSource:
    """The `HeadSource` of the lineage at `s3://bucket/prefix/` (its latest.json)."""

    def head(checkpoint_id: int, meta: dict) -> Head | None:
        ref = read_latest(s3, bucket, prefix).ref
        if ref is None:
            return None  # the lineage has no checkpoint yet: the materialization is all there is
        named = {_uri(meta.get("checkpoint_uri"))} if meta.get("checkpoint_uri") else {_uri(meta.get("resumed_from"))}
        if _uri(ref.uri) in named:
            return None
        topic, position = saved_position(s3, bucket, ref)
        key = hashlib.sha1(f"{ref.uri}@{ref.created_at}".encode()).hexdigest()[:10]
        return Head(checkpoint_id, position, topic or meta.get("topic") or None, key)

    return head


def _uri(value: object) -> str:
    return str(value or "").rstrip("/")
