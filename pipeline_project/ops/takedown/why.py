"""`why <s3-key | doc-id>`: what became of one document (or of every document of one raw object), read only: in
which batch it was kept or dropped and why, its copies, the blocks holding them and the checkpoints that trained
on those blocks."""

from __future__ import annotations

from typing import Any

from pipeline_project.ops.takedown.apply import Stores, copy_rows, exposure_part, resolve
from pipeline_project.ops.takedown.corpus import is_of_object, object_key


def decisions(stores: Stores, ref: str) -> list[dict[str, Any]]:
    """Every published record of `ref` (a document id `<key>#<line>`, or a raw key: every document of the object,
    a whole-file document included): batch, state (kept, dropped, quarantined), step and reason."""
    key = object_key(ref)
    wanted = (lambda d: d == ref) if "#" in ref else (lambda d: is_of_object(d, key))
    out = []
    for batch in stores.corpus.batches_of_object(key):
        for rec in stores.corpus.kept(batch):
            if wanted(str(rec.get("id"))):
                out.append({"batch": batch, "doc_id": rec["id"], "state": "kept", "step": "", "reason": ""})
        for rec in stores.corpus.excluded(batch):
            if wanted(str(rec.get("id"))):
                state = "dropped" if rec.get("kind") == "dropped" else "quarantined"
                out.append(
                    {
                        "batch": batch,
                        "doc_id": rec["id"],
                        "state": state,
                        "step": rec.get("step", ""),
                        "reason": rec.get("reason", ""),
                    }
                )
    return out


def why(stores: Stores, ref: str) -> dict[str, Any]:
    records = decisions(stores, ref)
    kind = "doc" if "#" in ref else "source"
    try:
        resolved = resolve(stores, kind, ref)
    except LookupError:
        resolved = None
    if resolved is None:
        return {"ref": ref, "records": records, "copies": [], "blocks": [], "exposure": None}
    hits = resolved.located.hits
    return {
        "ref": ref,
        "records": records,
        "copies": [c.model_dump() for c in copy_rows(resolved.copies, resolved.located)],
        "blocks": [vars(h) for h in hits],
        "unproduced_batches": resolved.located.unproduced,
        "exposure": {
            k: [x.model_dump() for x in v] if isinstance(v, list) else v for k, v in exposure_part(stores, hits).items()
        },
    }
