"""What a takedown reads of the published corpus in S3: the batches' shard manifests, their kept documents (the
shards, in ordinal order) and their dropped ones (the exclusion sink), and a raw object's documents."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.output.publish import ShardManifest, read_shard_manifest
from pipeline_project.cleaning.output.shards import read_shard
from pipeline_project.cleaning.records import Document


class Corpus:
    """The published batches under `shards_prefix`, each manifest and shard read once."""

    def __init__(self, s3: Any, bucket: str, shards_prefix: str = "shards/") -> None:
        self.s3, self.bucket, self.prefix = s3, bucket, shards_prefix
        self._manifests: dict[str, ShardManifest | None] = {}
        self._kept: dict[str, list[dict]] = {}
        self._archived: dict[tuple[str, str], list[dict] | None] = {}

    def batches(self) -> list[str]:
        names, token = [], ""
        while True:
            more = {"ContinuationToken": token} if token else {}
            page = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, Delimiter="/", **more)
            names += [p["Prefix"][len(self.prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])]
            token = page.get("NextContinuationToken", "")
            if not page.get("IsTruncated") or not token:
                break
        return sorted(b for b in names if self.manifest(b) is not None)

    def manifest(self, batch: str) -> ShardManifest | None:
        if batch not in self._manifests:
            try:
                self._manifests[batch] = read_shard_manifest(self.s3, self.bucket, f"{self.prefix}{batch}/")
            except self.s3.exceptions.NoSuchKey:
                self._manifests[batch] = None
        return self._manifests[batch]

    def kept(self, batch: str) -> list[dict]:
        """The batch's kept documents in ordinal order (the `spans` header's ordinals index this list)."""
        if batch not in self._kept:
            records: list[dict] = []
            for entry in self.manifest(batch).shards:
                records += read_shard(self.s3.get_object(Bucket=self.bucket, Key=entry.key)["Body"].read())
            self._kept[batch] = records
        return self._kept[batch]

    def kept_in(self, batch: str, publication: str | None) -> tuple[list[dict], bool]:
        """The kept documents of the batch's publication `publication` (a ledger entry's content hash, the `pub`
        header of its messages): the current one's, or those of the copy archived when it was produced; and
        whether that publication was found. Not found (an entry written before publications were archived, or
        by a producer that names its content otherwise): the current manifest's, as before the header."""
        from pipeline_project.provenance.publications import read_archived

        current = self.manifest(batch)
        if publication is None or (current is not None and current.content_hash() == publication):
            return self.kept(batch), publication is not None
        key = (batch, publication)
        if key not in self._archived:
            manifest = read_archived(self.s3, self.bucket, f"{self.prefix}{batch}/", publication)
            records: list[dict] | None = None
            if manifest is not None:
                records = []
                for entry in manifest.shards:
                    records += read_shard(self.s3.get_object(Bucket=self.bucket, Key=entry.key)["Body"].read())
            self._archived[key] = records
        found = self._archived[key]
        return (found, True) if found is not None else (self.kept(batch), False)

    def excluded(self, batch: str) -> Iterator[dict]:
        manifest = self.manifest(batch)
        if manifest is None or not manifest.exclusions:
            return iter(())
        try:
            data = self.s3.get_object(Bucket=self.bucket, Key=manifest.exclusions)["Body"].read()
        except self.s3.exceptions.NoSuchKey:
            return iter(())
        return read_shard(data)

    def batches_of_object(self, key: str) -> list[str]:
        return [b for b in self.batches() if key in self.manifest(b).input_keys]


def object_key(ref: str) -> str:
    """The raw object of a document id (`<raw key>#<line>` for a JSON Lines record, the key for a whole file)."""
    return ref.partition("#")[0]


def is_of_object(doc_id: str, key: str) -> bool:
    return doc_id == key or doc_id.startswith(f"{key}#")


def raw_documents(s3: Any, bucket: str, key: str, config: CleaningConfig) -> list[Document]:
    """The documents the cleaning's readers make of the raw object `s3://bucket/key` (none when it is gone)."""
    from pipeline_project.cleaning.read.batch import iter_batch_items
    from pipeline_project.ingest.manifest import BatchManifest, RawObject

    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except Exception:  # noqa: BLE001 - deleted, or never there: the published records still name it
        return []
    obj = RawObject(
        key=key, etag=head["ETag"].strip('"'), size=head["ContentLength"], last_modified=str(head["LastModified"])
    )
    manifest = BatchManifest(batch_id="takedown", bucket=bucket, objects=(obj,))
    return [d for d in iter_batch_items(s3, manifest, config) if isinstance(d, Document)]
