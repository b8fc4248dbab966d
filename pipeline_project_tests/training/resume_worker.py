"""Run by torchrun in test_resume_ranks.py: one rank opens its invocation and resume point as `run_job` does, with
an S3 client that counts what this rank reads, and writes down what it got."""

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import torch

from pipeline_project.streaming.kafka.client import KafkaSettings
from pipeline_project.streaming.topic import TopicSpec
from pipeline_project.training import distributed, run
from pipeline_project.training.job import JobConfig
from pipeline_project.training.reporting import Reporter
from pipeline_project.training.run.invocation import open_invocation, open_resume_point
from pipeline_project_tests.training.helpers import tiny_config


class CountingS3:
    def __init__(self, s3):
        self._s3, self.latest_reads, self.downloads = s3, 0, 0

    def get_object(self, **kw):
        self.latest_reads += kw["Key"].endswith("/latest.json")
        return self._s3.get_object(**kw)

    def download_file(self, *args, **kw):
        self.downloads += 1
        return self._s3.download_file(*args, **kw)

    def __getattr__(self, name):
        return getattr(self._s3, name)


def digests(directory: Path) -> dict[str, str]:
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


args = json.loads(sys.argv[1])
info = distributed.init_distributed()
job = JobConfig(
    train=tiny_config(),
    kafka=KafkaSettings(bootstrap_servers="127.0.0.1:9"),  # never contacted: no loader is built
    topic=TopicSpec(name="unused"),
    s3_endpoint=args["s3_endpoint"],
    bucket=args["bucket"],
    checkpoint_prefix=args["prefix"],
)
inv = open_invocation(job, info, torch.device("cpu"), Reporter())
counting = CountingS3(inv.s3)
inv = dataclasses.replace(inv, s3=counting)
resume = open_resume_point(inv)
resume_dirs = sorted(str(p) for p in inv.work_dir.glob("resume-*"))
out = {
    "rank": info.rank,
    "local_rank": info.local_rank,
    "latest_reads": counting.latest_reads,
    "downloads": counting.downloads,
    "work_dir": str(inv.work_dir),
    "previous": dataclasses.asdict(resume.previous),
    "etag": inv.lineage.pointer.etag,
    "step": resume.state.step,
    "files": {d: digests(Path(d)) for d in resume_dirs},
}
Path(args["out"], f"rank{info.rank}.json").write_text(json.dumps(out))
distributed.barrier()
run.remove_scratch(inv)
distributed.destroy()
