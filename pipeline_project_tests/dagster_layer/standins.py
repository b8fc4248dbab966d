"""In-process stand-ins for the Dagster layer's resources (the `project_fully_featured` pattern).

They let a test materialize the real assets in seconds. The real-stack tests beside this module stay the
proof that the assets work against S3, Kafka and MLflow; these only make asset logic quick to change.

Each stand-in keeps its state in a module-level store named by `store`, because Dagster re-creates
resource objects for every run.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import dagster as dg
import numpy as np
from botocore.exceptions import ClientError
from dagster_aws.s3 import S3Resource

from pipeline_project.defs.resources.dedup import DedupIndexResource
from pipeline_project.defs.resources.kafka import KafkaResource
from pipeline_project.defs.resources.mlflow import MlflowResource
from pipeline_project.streaming.kafka.format import PAD_TOKEN
from pipeline_project.streaming.ledger.records import LedgerRecords, ProduceReport
from pipeline_project.streaming.produce.fim import FimApplier, FimSentinels
from pipeline_project.streaming.produce.packing import DomainPackers
from pipeline_project.streaming.topic import TopicSpec

_S3: dict[str, dict[tuple[str, str], tuple[bytes, datetime]]] = {}
_KAFKA: dict[str, dict[str, Any]] = {}
MLFLOW_RUNS: list[dict[str, Any]] = []  # every ingest run the stand-in MLflow was asked to log
EOS = 0


class _NoSuchKeyError(ClientError):
    def __init__(self, key: str):
        super().__init__({"Error": {"Code": "NoSuchKey", "Message": key}}, "GetObject")


def _client_error(code: str, key: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": key}}, "GetObject")


class _Exceptions:
    NoSuchKey = _NoSuchKeyError
    ClientError = ClientError


class _Paginator:
    def __init__(self, client: MemoryS3Client):
        self.client = client

    def paginate(self, Bucket: str, Prefix: str = "", **_: Any):
        page = self.client.list_objects_v2(Bucket=Bucket, Prefix=Prefix)
        yield page
        while page.get("IsTruncated"):
            page = self.client.list_objects_v2(
                Bucket=Bucket, Prefix=Prefix, ContinuationToken=page["NextContinuationToken"]
            )
            yield page


class MemoryS3Client:
    """The handful of boto3 S3 calls the assets and the sensor make, over a dict."""

    exceptions = _Exceptions

    def __init__(self, objects: dict[tuple[str, str], tuple[bytes, datetime]], clock=None):
        self.objects = objects
        self.listed_keys = 0
        self.clock = clock or self._now  # the server's time, sent as a listing's Date header

    def _now(self) -> datetime:
        return max([datetime.now(timezone.utc)] + [t for _, t in self.objects.values()])

    def put_object(self, Bucket: str, Key: str, Body: bytes, **_: Any) -> dict:
        # strictly increasing times, so the sensor's since_last_modified cursor sees every object
        newest = max((t for _, t in self.objects.values()), default=datetime.now(timezone.utc))
        self.objects[(Bucket, Key)] = (bytes(Body), max(datetime.now(timezone.utc), newest + timedelta(seconds=1)))
        return {"ETag": self._etag(Bucket, Key)}

    def upload_fileobj(self, fileobj, Bucket: str, Key: str, **_: Any) -> None:
        self.put_object(Bucket=Bucket, Key=Key, Body=fileobj.read())

    def delete_object(self, Bucket: str, Key: str, **_: Any) -> dict:
        self.objects.pop((Bucket, Key), None)
        return {}

    def _etag(self, bucket: str, key: str) -> str:
        return '"' + hashlib.md5(self.objects[(bucket, key)][0]).hexdigest() + '"'

    def get_object(self, Bucket: str, Key: str, Range: str = "", IfMatch: str = "", **_: Any) -> dict:
        if (Bucket, Key) not in self.objects:
            raise _NoSuchKeyError(Key)
        data = self.objects[(Bucket, Key)][0]
        etag = self._etag(Bucket, Key)
        if IfMatch and IfMatch.strip('"') != etag.strip('"'):
            raise _client_error("PreconditionFailed", Key)
        if Range:  # "bytes=a-b", as the readers ask
            a, b = Range.removeprefix("bytes=").split("-")
            data = data[int(a) : int(b) + 1]
        return {"Body": io.BytesIO(data), "ETag": etag, "ContentLength": len(data)}

    def head_object(self, Bucket: str, Key: str, **_: Any) -> dict:
        got = self.get_object(Bucket, Key)
        return {"ETag": got["ETag"], "ContentLength": got["ContentLength"]}

    def list_objects_v2(self, Bucket: str, Prefix: str = "", StartAfter: str = "", MaxKeys: int = 1000,
                        ContinuationToken: str = "", Delimiter: str = "", **_: Any) -> dict:  # fmt: skip
        after = ContinuationToken or StartAfter
        keys = sorted(k for (b, k) in self.objects if b == Bucket and k.startswith(Prefix) and k > after)
        if Delimiter:  # S3 rolls keys up to their common prefix; a continuation goes on after the last one
            rolled = [Prefix + k[len(Prefix):].split(Delimiter, 1)[0] + Delimiter if Delimiter in k[len(Prefix):]
                      else k for k in keys]  # fmt: skip
            keys = sorted({r for r in rolled if not (ContinuationToken and r <= ContinuationToken)})
        page = keys[:MaxKeys]
        self.listed_keys += len(page)  # what a tick cost: keys returned by listings
        contents = [
            {"Key": k, "ETag": self._etag(Bucket, k), "Size": len(self.objects[(Bucket, k)][0]),
             "LastModified": self.objects[(Bucket, k)][1]}
            for k in page if (Bucket, k) in self.objects and not (Delimiter and k.endswith(Delimiter))
        ]  # fmt: skip
        prefixes = [
            {"Prefix": k} for k in page if Delimiter and k.endswith(Delimiter) and (Bucket, k) not in self.objects
        ]
        out = {"Contents": contents, "KeyCount": len(page), "IsTruncated": len(keys) > MaxKeys,
               "ResponseMetadata": {"HTTPHeaders": {"date": format_datetime(self.clock(), usegmt=True)}}}  # fmt: skip
        if prefixes:
            out["CommonPrefixes"] = prefixes
        if out["IsTruncated"]:
            out["NextContinuationToken"] = page[-1]
        return out

    def get_paginator(self, name: str) -> _Paginator:
        assert name == "list_objects_v2", name
        return _Paginator(self)


class MemoryS3Resource(S3Resource):
    store: str

    def get_client(self) -> MemoryS3Client:
        return MemoryS3Client(_S3.setdefault(self.store, {}))


class MemoryKafkaResource(KafkaResource):
    """Blocks kept per topic in memory; bytes stand in for tokens, so no tokenizer is loaded."""

    bootstrap_servers: str = "memory"
    store: str

    def _state(self) -> dict[str, Any]:
        return _KAFKA.setdefault(self.store, {"topics": {}, "ledger": {}})

    def ensure_token_topic(self, spec: TopicSpec):
        self._state()["topics"].setdefault(spec.name, [[] for _ in range(spec.partitions)])

    def produce_token_blocks(self, spec: TopicSpec, texts: Iterable[str | tuple[str | None, str]], *, source: str,
                             ledger_key: str, content_hash: str, rehydration: str = "") -> ProduceReport:  # fmt: skip
        topic, seq_len, fim = spec.name, spec.seq_len, spec.fim
        state = self._state()
        existing = state["ledger"].get((topic, ledger_key))
        if existing is not None:
            existing.reused = True
            return existing
        packer = DomainPackers(seq_len, EOS)  # a block never mixes domains, as in the real producer
        applier = FimApplier(fim, FimSentinels(257, 258, 259)) if fim is not None and fim.active else None
        if applier is not None:  # FIM as the real producer lays it out, on byte "tokens" (sentinels above 256)
            packer.fim_docs = applier.counts
        blocks, domains = [], {}
        for item in texts:
            domain, text = (None, item) if isinstance(item, str) else item
            ids = applier.encode([text], [domain], _byte_ids)[0] if applier else _byte_ids([text])[0]
            for d, b in packer.add([ids], [domain]):
                blocks.append(b)
                _count_domain(domains, d, b, seq_len)
        for d, b in packer.flush():
            blocks.append(b)
            _count_domain(domains, d, b, seq_len)
        for d, s in packer.per_domain().items():
            domains[d].update({k: s[k] for k in ("docs", "fim_docs") if k in s})
        joined = np.concatenate([b for b in blocks if len(b)] or [np.zeros((0, seq_len), dtype=np.uint32)])
        partitions = state["topics"][topic]
        offsets = {}
        for i, block in enumerate(joined):
            p = i % len(partitions)
            partitions[p].append((source, block))
            first = offsets.get(p, (len(partitions[p]) - 1,))[0]
            offsets[p] = (first, len(partitions[p]) - 1)
        report = ProduceReport(
            topic=topic, ledger_key=ledger_key, content_hash=content_hash, tokenizer_name="bytes",
            tokenizer_hash="bytes", seq_len=seq_len, offsets=offsets, messages=len(joined), blocks=len(joined),
            tokens=int(joined.size) - packer.stats()["padded_tokens"], bytes=int(joined.nbytes), seconds=0.0, mb_per_s=0.0,
            transactional_id=f"memory.{ledger_key}", source=source, pad_tokens=packer.stats()["padded_tokens"],
            tail_tokens=packer.tail_tokens, transactions=1, domains=dict(sorted(domains.items())),
        )  # fmt: skip
        state["ledger"][(topic, ledger_key)] = report
        return report

    def ledger_entry(self, topic: str, ledger_key: str) -> ProduceReport | None:
        return self._state()["ledger"].get((topic, ledger_key))

    def ledger_records(self, topic: str, ledger_key: str) -> LedgerRecords:
        entry = self.ledger_entry(topic, ledger_key)
        return LedgerRecords(completed={ledger_key: entry} if entry else {}, progress={})

    def verify_blocks(self, report: ProduceReport) -> dict[str, Any]:
        partitions = self._state()["topics"][report.topic]
        found = sum(
            1
            for p, (first, last) in report.offsets.items()
            for source, _ in partitions[p][first : last + 1]
            if source == report.source
        )
        if found != report.blocks:
            raise AssertionError(f"{found} blocks in the claimed ranges, the report claims {report.blocks}")
        return {"messages": found, "blocks": found}

    def blocks(self, topic: str) -> list[tuple[str, np.ndarray]]:
        return [m for part in self._state()["topics"].get(topic, []) for m in part]


def _count_domain(domains: dict, domain: str | None, blocks: np.ndarray, seq_len: int) -> None:
    if domain is None:
        return
    c = domains.setdefault(domain, {"messages": 0, "blocks": 0, "tokens": 0, "pad_tokens": 0, "docs": 0})
    pad = int((blocks == PAD_TOKEN).sum())
    c["messages"] += len(blocks)  # one block per message here
    c["blocks"] += len(blocks)
    c["pad_tokens"] += pad
    c["tokens"] += len(blocks) * seq_len - pad


class MemoryMlflowResource(MlflowResource):
    tracking_uri: str = "memory://mlflow"

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        pass  # no MlflowClient: nothing is sent anywhere

    def log_ingest_run(self, *, run_name: str, tags: dict[str, str], params: dict[str, Any],
                       metrics: dict[str, float]) -> str:  # fmt: skip
        MLFLOW_RUNS.append({"run_name": run_name, "tags": tags, "params": params, "metrics": metrics})
        return f"{self.tracking_uri}/runs/{len(MLFLOW_RUNS)}"


_DEDUP: dict[str, Any] = {}


class MemoryDedupIndexResource(DedupIndexResource):
    """The in-memory `MemoryDedupIndex` (the one the cleaning library's tests use), kept per store."""

    postgres_url: str = "memory"
    store: str

    def open(self, num_perm: int, num_bands: int, is_published=None):
        from pipeline_project.cleaning.dedup.memory import MemoryDedupIndex

        return _DEDUP.setdefault(self.store, MemoryDedupIndex(num_perm=num_perm, num_bands=num_bands))

    def blocklist(self):
        """The takedown blocklist of the store: `MemoryBlocklist`, empty until a test adds to it."""
        from pipeline_project.cleaning.dedup.blocklist import MemoryBlocklist

        return _DEDUP.setdefault(f"{self.store}/blocklist", MemoryBlocklist())


def _byte_ids(texts: list[str]) -> list[np.ndarray]:
    return [np.frombuffer(t.encode(), dtype=np.uint8).astype(np.uint32) + 1 for t in texts]


def standin_resources(store: str, layout: Any) -> dict[str, dg.ConfigurableResource]:
    from pipeline_project.defs.resources.cleaning import CleaningResource
    from pipeline_project.defs.resources.locks import BatchLocks
    from pipeline_project.defs.resources.pushgateway import PushgatewayResource

    return {
        "locks": BatchLocks(),  # within this process
        "s3": MemoryS3Resource(store=store),
        "kafka": MemoryKafkaResource(store=store),
        "mlflow": MemoryMlflowResource(),
        "layout": layout,
        "cleaning": CleaningResource(workers=1),
        "dedup": MemoryDedupIndexResource(store=store),
        "pushgateway": PushgatewayResource(),  # no URL: the batch metrics are recorded, not pushed
    }


def without_postgres(resources: dict) -> dict:
    """The deployment's resources (`build_resources`) with the trigger's and training's backlog in SQLite beside the
    test's instance, their stand-in when no PostgreSQL URL is set: no PostgreSQL runs in the fast tier."""
    from pipeline_project.defs.resources import training_trigger
    from pipeline_project.settings import Settings

    kafka = resources["kafka"]
    fields = {name: getattr(kafka, name) for name in type(kafka).model_fields if name != "ledger_index_url"}
    return {**resources, "trigger": training_trigger(Settings()), "kafka": type(kafka)(**fields, ledger_index_url="")}
