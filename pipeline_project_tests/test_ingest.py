from datetime import datetime, timedelta, timezone

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from pipeline_project.cleaning import CleaningConfig, Document, Quarantined
from pipeline_project.cleaning.config import ReaderConfig
from pipeline_project.cleaning.read.batch import iter_batch_items
from pipeline_project.cleaning.read.readers import is_supported
from pipeline_project.common.s3 import UnsafeKeyError, key_components, key_to_path
from pipeline_project.ingest.manifest import BatchManifest, RawObject, make_batch_id
from pipeline_project_tests.dagster_layer.standins import MemoryS3Client

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)


def obj(key: str, seconds: float, etag: str = "e") -> dict:
    return {"Key": key, "ETag": f'"{etag}"', "Size": 10, "LastModified": T0 + timedelta(seconds=seconds)}


def test_batch_id_is_deterministic_in_the_objects_and_changes_with_etags():
    a = [RawObject.from_listing(obj("raw/a", 1)), RawObject.from_listing(obj("raw/b", 2))]
    assert make_batch_id(a) == make_batch_id(list(reversed(a)))
    b = [RawObject.from_listing(obj("raw/a", 1, etag="other")), a[1]]
    assert make_batch_id(a) != make_batch_id(b)


def test_manifest_round_trip():
    m = BatchManifest(batch_id="b1", bucket="pipeline", objects=(RawObject.from_listing(obj("raw/a", 1)),))
    assert BatchManifest.from_json(m.to_json()) == m
    assert m.total_bytes == 10


# ---- objects that vanish or change between the sensor tick and the run --------------------------------

BUCKET = "pipeline"


class FlakyS3Client(MemoryS3Client):
    """Raises `errors[key]` from get_object for the keys named, like S3 or the network would."""

    def __init__(self, objects, errors):
        super().__init__(objects)
        self.errors = errors

    def get_object(self, Bucket, Key, **kw):
        if Key in self.errors:
            raise self.errors[Key]
        return super().get_object(Bucket, Key, **kw)


def _store(files: dict[str, bytes]) -> dict:
    objects: dict = {}
    client = MemoryS3Client(objects)
    for key, body in files.items():
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
    return objects


def _manifest(objects: dict) -> BatchManifest:
    listing = MemoryS3Client(objects).list_objects_v2(Bucket=BUCKET)["Contents"]
    raws = tuple(RawObject.from_listing(o) for o in listing)
    return BatchManifest(batch_id=make_batch_id(list(raws)), bucket=BUCKET, objects=raws)


FILES = {
    "raw/a.jsonl": b'{"text": "alpha"}\n{"text": "beta"}\n',
    "raw/b.txt": b"bravo",
    "raw/c.jsonl": b'{"text": "gamma"}\n',
}


def _outcome(items) -> list[tuple[str, str]]:
    return [(i.id, i.reason if isinstance(i, Quarantined) else "doc") for i in items]


def test_an_object_deleted_after_the_manifest_is_quarantined_and_the_rest_is_read():
    objects = _store(FILES)
    manifest = _manifest(objects)
    del objects[(BUCKET, "raw/b.txt")]
    items = list(iter_batch_items(MemoryS3Client(objects), manifest, CleaningConfig()))
    assert _outcome(items) == [
        ("raw/a.jsonl#1", "doc"),
        ("raw/a.jsonl#2", "doc"),
        ("raw/b.txt", "object_missing"),
        ("raw/c.jsonl#1", "doc"),
    ]


def test_an_object_overwritten_after_the_manifest_is_quarantined_and_the_rest_is_read():
    objects = _store(FILES)
    manifest = _manifest(objects)
    MemoryS3Client(objects).put_object(Bucket=BUCKET, Key="raw/a.jsonl", Body=b'{"text": "new"}\n')
    items = list(iter_batch_items(MemoryS3Client(objects), manifest, CleaningConfig()))
    assert _outcome(items) == [("raw/a.jsonl", "object_changed"), ("raw/b.txt", "doc"), ("raw/c.jsonl#1", "doc")]


def _client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "Get"
    )


@pytest.mark.parametrize(
    ("code", "status", "reason"),
    [
        ("404", 404, "object_missing"),
        ("NotFound", 404, "object_missing"),
        ("PreconditionFailed", 412, "object_changed"),
        ("InvalidRange", 416, "object_changed"),
        ("AccessDenied", 403, "object_access_denied"),
        ("403", 403, "object_access_denied"),
        ("InvalidObjectState", 403, "object_archived"),
        ("KMS.DisabledException", 400, "object_unreadable"),
    ],
)
def test_per_object_permanent_errors_quarantine_that_object_with_its_code(code, status, reason):
    objects = _store(FILES)
    client = FlakyS3Client(objects, {"raw/b.txt": _client_error(code, status)})
    items = list(iter_batch_items(client, _manifest(objects), CleaningConfig()))
    assert ("raw/b.txt", reason) in _outcome(items) and len(items) == 4
    assert code in next(i.detail for i in items if i.id == "raw/b.txt")


@pytest.mark.parametrize(
    "error",
    [
        _client_error("SlowDown", 503),
        _client_error("InternalError", 500),
        _client_error("ServiceUnavailable", 503),
        _client_error("RequestTimeout", 400),
        _client_error("SomethingNew", 400),  # a code not known to be per-object: the batch fails, nothing is hidden
        EndpointConnectionError(endpoint_url="x"),
    ],
)
def test_other_errors_propagate_for_the_retry_policy(error):
    objects = _store(FILES)
    client = FlakyS3Client(objects, {"raw/b.txt": error})
    with pytest.raises(type(error)):
        list(iter_batch_items(client, _manifest(objects), CleaningConfig()))


def test_an_object_over_the_size_cap_is_quarantined_without_downloading_it():
    objects = _store({"raw/big.jsonl": b'{"text": "x"}\n' * 100, "raw/small.txt": b"ok"})
    boom = AssertionError("downloaded")
    client = FlakyS3Client(objects, {"raw/big.jsonl": boom})
    config = CleaningConfig(reader=ReaderConfig(max_decompressed_bytes=1000))
    items = list(iter_batch_items(client, _manifest(objects), config))
    assert _outcome(items) == [("raw/big.jsonl", "object_too_large"), ("raw/small.txt", "doc")]
    assert isinstance(items[1], Document)


def test_unsupported_suffixes_are_one_record_each_and_never_downloaded():
    objects = _store({"raw/x.bin": b"\x00", "raw/y.pdf": b"%PDF"})
    client = FlakyS3Client(objects, {k: AssertionError("downloaded") for _, k in objects})
    assert _outcome(iter_batch_items(client, _manifest(objects), CleaningConfig())) == [
        ("raw/x.bin", "unsupported_format"),
        ("raw/y.pdf", "unsupported_format"),
    ]
    assert is_supported("raw/Z.JSONL.ZST") and not is_supported("raw/z.jsonl.bz2")


# ---- objects read in ranged blocks ---------------------------------------------------------------------

BIG = b"".join(f'{{"text": "document {i} of a streamed object"}}\n'.encode() for i in range(300))


class RangeLog(MemoryS3Client):
    """Records each GET's Range; `on_get(n)` runs before the n-th GET (from 1) and may raise or change things."""

    def __init__(self, objects, on_get=None):
        super().__init__(objects)
        self.ranges: list[str] = []
        self.on_get = on_get

    def get_object(self, Bucket, Key, **kw):
        self.ranges.append(kw.get("Range", ""))
        if self.on_get:
            self.on_get(len(self.ranges))
        return super().get_object(Bucket, Key, **kw)


@pytest.fixture
def small_blocks(monkeypatch):
    from pipeline_project.cleaning.read import readers
    from pipeline_project.ingest import objects

    monkeypatch.setattr(objects, "BLOCK_BYTES", 1000)
    monkeypatch.setattr(readers, "STREAM_WINDOW", 500)


def test_an_object_is_read_in_ranged_blocks_and_gives_what_one_get_gives(small_blocks):
    objects = _store({"raw/big.jsonl": BIG})
    client = RangeLog(objects)
    items = list(iter_batch_items(client, _manifest(objects), CleaningConfig()))
    assert [d.text for d in items] == [f"document {i} of a streamed object" for i in range(300)]
    assert len(client.ranges) == -(-len(BIG) // 1000) and client.ranges[1] == "bytes=1000-1999"


def test_a_body_that_breaks_off_is_asked_for_again(small_blocks):
    from botocore.exceptions import ResponseStreamingError

    objects = _store({"raw/big.jsonl": BIG})

    class Broken(RangeLog):
        def get_object(self, Bucket, Key, **kw):
            resp = super().get_object(Bucket, Key, **kw)
            if len(self.ranges) in (3, 4):  # the third block breaks off twice; its third try reads
                resp["Body"] = type(
                    "Body", (), {"read": lambda _: (_ for _ in ()).throw(ResponseStreamingError(error="reset"))}
                )()
            return resp

    client = Broken(objects)
    items = list(iter_batch_items(client, _manifest(objects), CleaningConfig()))
    assert len(items) == 300 and all(isinstance(d, Document) for d in items)
    assert client.ranges[2] == client.ranges[3] == client.ranges[4] == "bytes=2000-2999"


def test_an_object_overwritten_while_it_streams_keeps_what_was_read_and_quarantines_the_rest(small_blocks):
    objects = _store({"raw/big.jsonl": BIG, "raw/next.txt": b"after"})

    def overwrite(n):
        if n == 4:
            MemoryS3Client(objects).put_object(Bucket=BUCKET, Key="raw/big.jsonl", Body=BIG.replace(b"of", b"OF"))

    items = list(iter_batch_items(RangeLog(objects, overwrite), _manifest(objects), CleaningConfig()))
    outcome = _outcome(items)
    read = [i for i in items if isinstance(i, Document) and i.id.startswith("raw/big")]
    assert 0 < len(read) < 300 and all(" of " in d.text for d in read)  # every document from the listed version
    assert outcome[len(read) :] == [("raw/big.jsonl", "object_changed"), ("raw/next.txt", "doc")]


# ---- keys that become local paths ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["../etc/passwd", "a/../../b.txt", "/abs/x.txt", "a//b.txt", "a/./b.txt", "", "a\\..\\b.txt", "a\x00b.txt"]
)
def test_unsafe_keys_are_refused(key, tmp_path):
    with pytest.raises(UnsafeKeyError):
        key_components(key)
    with pytest.raises(UnsafeKeyError):
        key_to_path(tmp_path, key)


def test_safe_keys_become_paths_under_the_root(tmp_path):
    assert key_to_path(tmp_path, "raw/naïve 文件 🎉.txt") == tmp_path.resolve() / "raw" / "naïve 文件 🎉.txt"
    (tmp_path / "out").symlink_to("/")
    with pytest.raises(UnsafeKeyError, match="symlink"):
        key_to_path(tmp_path, "out/etc/passwd")
