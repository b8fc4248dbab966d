"""Run by torchrun in test_agreed_partitions.py: two gloo ranks, each listing the topic at another moment (rank 1
after it grew from 4 partitions to 6), agree on one partition count; prints it as JSON."""

import json
import sys
from types import SimpleNamespace

from pipeline_project.training import distributed
from pipeline_project.training.run import agreed_partition_count

info = distributed.init_distributed()
seen = 4 if info.rank == 0 else 6  # the topic grew between the two ranks' listings
job = SimpleNamespace(kafka=SimpleNamespace(make_admin=lambda: None), topic=SimpleNamespace(name="t"))
count = agreed_partition_count(job, describe=lambda admin, topic, timeout: (tuple(range(seen)), "id"))
print(json.dumps({"rank": info.rank, "count": count}), flush=True)
distributed.destroy()
sys.exit(0)
