"""What comes back from S3 is not trusted: keys that would climb out of the download directory, and a
`latest.json` that points anywhere but at a step folder of its own lineage, are refused before anything is written."""

from __future__ import annotations

import json
import uuid

import pytest

from pipeline_project.training.checkpoint.ref import check_step_uri, parse_ref
from pipeline_project.training.checkpoint.store import download_prefix, load_latest, read_latest, s3_client
from pipeline_project.training.errors import InvalidCheckpointError

PREFIX = "checkpoints/run/step-7-ab12cd34"


class _Listing:
    """An S3 client that lists `keys` under any prefix and "downloads" each as its own key's bytes: what a
    server that stores any key (AWS S3, MinIO) could answer. The local s3proxy refuses `..` keys itself."""

    def __init__(self, keys: list[str]):
        self.keys, self.downloaded = keys, []

    def get_paginator(self, _name):
        return self

    def paginate(self, **_kw):
        return [{"Contents": [{"Key": k} for k in self.keys]}]

    def download_file(self, _bucket, key, target):
        self.downloaded.append(key)
        with open(target, "w") as f:
            f.write(key)


@pytest.mark.parametrize(
    "bad_key",
    [
        f"{PREFIX}/../../../escaped.txt",
        f"{PREFIX}/hf/../../../../escaped.txt",
        f"{PREFIX}//tmp/escaped.txt",  # the rest is absolute: Path("dir") / "/tmp/x" is /tmp/x
        f"{PREFIX}/hf/..",
        f"{PREFIX}/hf\\..\\..\\escaped.txt",
        "checkpoints/other-run/step-1-ff/hf/config.json",  # not under the listed prefix at all
    ],
)
def test_a_key_that_leaves_the_directory_is_refused_and_nothing_is_written(tmp_path, bad_key):
    target = tmp_path / "inside" / "ckpt"
    s3 = _Listing([f"{PREFIX}/hf/config.json", bad_key, f"{PREFIX}/resume/state.pt"])
    with pytest.raises(InvalidCheckpointError, match="refusing to download") as err:
        download_prefix(s3, "pipeline", PREFIX, target)
    assert "\n" not in str(err.value) and repr(bad_key.split("/")[-1])[1:-1] in str(err.value)
    assert s3.downloaded == []  # the whole listing is checked before the first byte is written
    assert sorted(p.name for p in tmp_path.rglob("*")) == []


def test_keys_inside_the_directory_are_downloaded_under_it(tmp_path):
    s3 = _Listing([f"{PREFIX}/", f"{PREFIX}/hf/config.json", f"{PREFIX}/resume/state.pt", f"{PREFIX}/a..b.txt"])
    download_prefix(s3, "pipeline", PREFIX + "/", tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "a..b.txt",
        "hf/config.json",
        "resume/state.pt",
    ]


def _ref(**over):
    uri = "s3://pipeline/checkpoints/run/step-7-ab12cd34/"
    data = {"step": 7, "uri": uri, "hf_uri": f"{uri}hf/", "resume_uri": f"{uri}resume/", "created_at": "t"}
    return {**data, **over}


BAD_REFS = {
    "step-as-string": (_ref(step="7"), "step '7' is not a non-negative integer"),
    "step-as-float": (_ref(step=7.0), "step 7.0 is not"),
    "step-as-bool": (_ref(step=True), "step True is not"),
    "negative-step": (_ref(step=-1), "step -1 is not"),
    "other-lineage": (_ref(uri="s3://pipeline/checkpoints/other/step-7-ab/"), "is not a step folder"),
    "other-bucket": (_ref(uri="s3://evil/checkpoints/run/step-7-ab/"), "is not a step folder"),
    "climbs-out": (_ref(uri="s3://pipeline/checkpoints/run/step-7-ab/../../../"), "is not a step folder"),
    "the-lineage-root": (_ref(uri="s3://pipeline/checkpoints/run/"), "is not a step folder"),
    "another-step": (_ref(uri="s3://pipeline/checkpoints/run/step-8-ab/"), "step-7-<id>/"),
    "hf-elsewhere": (_ref(hf_uri="s3://pipeline/secrets/"), "hf_uri / resume_uri are not"),
    "missing-field": ({"step": 7}, "must be an object with exactly"),
    "extra-field": (_ref(extra=1), "must be an object with exactly"),
    "not-an-object": ([7], "must be an object"),
}


@pytest.mark.parametrize("name", BAD_REFS)
def test_an_invalid_latest_json_is_refused_with_one_line(name):
    data, message = BAD_REFS[name]
    with pytest.raises(InvalidCheckpointError, match=r"^s3://pipeline/checkpoints/run/latest\.json") as err:
        parse_ref(json.dumps(data).encode(), "pipeline", "checkpoints/run")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_valid_references_parse_old_and_new_folder_names():
    assert parse_ref(json.dumps(_ref()).encode(), "pipeline", "checkpoints/run/").step == 7
    old = "s3://pipeline/checkpoints/run/step-7/"
    assert parse_ref(json.dumps(_ref(uri=old, hf_uri=old + "hf/", resume_uri=old + "resume/")).encode(),
                     "pipeline", "checkpoints/run").uri == old  # fmt: skip
    with pytest.raises(InvalidCheckpointError, match="not JSON"):
        parse_ref(b"{not json", "pipeline", "checkpoints/run")
    assert check_step_uri("s3://b/p/step-3-0f/", "b", "p") == "s3://b/p/step-3-0f/"


@pytest.mark.stack
@pytest.mark.parametrize("name", ["step-as-string", "other-lineage", "other-bucket", "climbs-out"])
def test_load_latest_refuses_a_malicious_latest_json_in_s3(stack, tmp_path, name):
    """On the real S3 server: the lineage's latest.json is replaced by a hostile one; nothing is downloaded."""
    s3 = s3_client(stack)
    prefix = f"checkpoints/test-trust-{uuid.uuid4().hex[:8]}"
    data = json.loads(
        json.dumps(BAD_REFS[name][0]).replace("checkpoints/run", prefix).replace("pipeline", stack.bucket)
    )
    s3.put_object(Bucket=stack.bucket, Key=f"{prefix}/latest.json", Body=json.dumps(data).encode())
    with pytest.raises(InvalidCheckpointError, match=f"{prefix}/latest.json"):
        read_latest(s3, stack.bucket, prefix)
    with pytest.raises(InvalidCheckpointError):
        load_latest(s3, stack.bucket, prefix, tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


class _WriteRefusedThenBlind:
    """latest.json's conditional write is refused (412), and latest.json cannot be read back afterwards."""

    def __init__(self):
        self.deleted, self.reads = [], 0

    def get_object(self, **_kw):
        self.reads += 1
        if self.reads == 1:  # upload_checkpoint's fail-fast read: no latest.json yet
            raise self.exceptions.NoSuchKey({}, "GetObject")
        raise ConnectionError("S3 unreachable")

    def upload_file(self, *_args):
        return None

    def put_object(self, **_kw):
        from botocore.exceptions import ClientError

        raise ClientError({"Error": {"Code": "PreconditionFailed"}}, "PutObject")

    def delete_objects(self, **kw):
        self.deleted += kw["Delete"]["Objects"]

    class exceptions:  # boto3 clients name it so
        class NoSuchKey(Exception):
            pass


def test_a_refused_write_that_cannot_be_read_back_removes_nothing(tmp_path):
    """The refusal may be the retry of a write that was applied: without reading latest.json back there is no
    telling, so the upload stays (garbage at worst) and the write's own error is raised."""
    from botocore.exceptions import ClientError

    from pipeline_project.training.checkpoint.store import LatestPointer, upload_checkpoint

    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "model.safetensors").write_bytes(b"w")
    s3 = _WriteRefusedThenBlind()
    with pytest.raises(ClientError, match="PreconditionFailed"):
        upload_checkpoint(s3, "pipeline", "checkpoints/run", 3, tmp_path, expected=LatestPointer(None, None))
    assert s3.reads == 2 and s3.deleted == []
