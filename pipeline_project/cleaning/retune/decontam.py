"""A retune after a decontamination change: which documents to re-check, and with what (issue 31 items 2, 3).

The `decontaminate` step keeps no signal, so a new benchmark (or decontamination newly on, or a benchmark file
changed) is answered from the cleaned text: every document that reached the step under the old config (kept,
or dropped by it or after it: dedup, a late drop at index commit) is matched against the new config's index.
The text is the one the batch published: a kept document's from its shard, a dropped one's from the exclusion
sink. Both are *post-masking* (PII and secrets masking runs after decontamination, and the sink masks as the
shards do), so an n-gram that spans a masked e-mail address, key or IP address compares the masked text, not
the text the cleaner matched; a benchmark that holds such a value in clear can miss where a re-clean drops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.decontam.index import load_index

DECONTAMINATE = "decontaminate"
TextOf = Callable[[list[str]], dict[str, str | None]]  # doc ids -> their cleaned text (missing: not found)


def decontam_change(old: CleaningConfig, new: CleaningConfig, old_hash: str = "") -> str | None:
    """Why the documents that reach `decontaminate` must be re-checked under `new`, or None.

    `old_hash` is the config hash the batch was cleaned with (its manifest's): with both configs on and equal,
    a benchmark file changed in place since shows as another hash (or as a file that is gone)."""
    a, b = old.decontamination, new.decontamination
    if not b.enabled:
        return None
    if not a.enabled:
        return "decontaminate: newly on"
    if a != b:
        return "decontaminate: benchmarks or settings changed"
    if old_hash:
        try:
            same = old.config_hash() == old_hash
        except ValueError:  # a benchmark file of the old config is gone
            same = False
        if not same:
            return "decontaminate: a benchmark file changed since the batch was cleaned"
    return None


class Recheck:
    """Matches the cleaned texts of the documents that reached the step against `config`'s benchmark index."""

    def __init__(self, config: CleaningConfig, why: str):
        self.config, self.why = config.decontamination, why

    def note(self) -> str:
        return f"{self.why}: documents that reached it are re-checked from their cleaned (masked) text"

    def reasons(self, ids: list[str], text_of: TextOf | None) -> dict[str, str | None]:
        """{doc id: "decontaminated:<benchmark>" | "" (clean) | None (no text found)}."""
        texts = text_of(ids) if ids and text_of is not None else {}
        index = load_index(self.config) if ids else None
        out: dict[str, str | None] = {}
        for doc in ids:
            text = texts.get(doc)
            if text is None:
                out[doc] = None
            else:
                benchmark = index.match(text)
                out[doc] = "" if benchmark is None else f"decontaminated:{benchmark}"
        return out


def published_texts(client, bucket: str, manifest, kept: Iterable[str], dropped: Iterable[str]) -> dict[str, str]:
    """The cleaned text of `kept` documents (from the batch's shards) and `dropped` ones (its exclusion sink)."""
    import io
    import json

    import zstandard

    from pipeline_project.cleaning.output.shards import read_shard

    kept, dropped = set(kept), set(dropped)
    out: dict[str, str] = {}
    for entry in manifest.shards if kept else ():
        for record in read_shard(client.get_object(Bucket=bucket, Key=entry.key)["Body"].read()):
            if record["id"] in kept:
                out[record["id"]] = record["text"]
    if dropped and manifest.exclusions:
        data = client.get_object(Bucket=bucket, Key=manifest.exclusions)["Body"].read()
        lines = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)), encoding="utf-8")
        for line in lines:
            record = json.loads(line)
            if record.get("kind") == "dropped" and record["id"] in dropped and "text" in record:
                out[record["id"]] = record["text"]
    return out
