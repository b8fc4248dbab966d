"""The cluster harness end to end: 9 hosts (network namespaces) up once for the module, then traffic across the
virtual network, a partitioned broker, a killed host, and `down` leaving nothing behind.

The session's cluster (`conftest.py`: prefix `ppt`, its own subnet and state). The tests run in file order; the
last one takes the cluster down, and `conftest.py` moves it after every other module's tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import psutil
import pytest
from confluent_kafka.admin import AdminClient
from typer.testing import CliRunner

from pipeline_project.cli.app import app
from pipeline_project.cluster import Cluster, netns
from pipeline_project.stack.config import REPO_ROOT
from pipeline_project_harness.cluster.spec import CLI_OPTS, SPEC

pytestmark = pytest.mark.cluster

CLIENT = (sys.executable, "-m", "pipeline_project_harness.cluster.host_client")
TOPIC = "cluster-test"


def cli(*args: str):
    return CliRunner().invoke(app, [*CLI_OPTS, *args])


def on_host(cluster: Cluster, host: str, *args: str, timeout: float = 120) -> dict:
    """Run the test client on `host` through `cluster exec`; its JSON answer."""
    done = cluster.exec(host, [*CLIENT, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args} on {host} failed: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_host_under_a_locked_dir_in_tmp_sees_its_files_and_writes_its_own_tmp(cluster: Cluster):
    """A host whose directory is under /tmp (a checkout cloned there) inside a mode-700 directory: /tmp is not
    mounted over (it would hide that directory, and a bind back in makes renames across it fail), and its
    processes' TMPDIR is its own scratch dir."""
    import dataclasses
    import os
    import tempfile
    from pathlib import Path

    home = Path(tempfile.mkdtemp(prefix="pp-home-", dir="/tmp"))
    os.chmod(home, 0o700)
    try:
        host = dataclasses.replace(cluster.host("trainer-2"), dir=home / "checkout" / ".cluster" / "trainer-2")
        host.tmp.mkdir(parents=True)
        (host.dir / "marker").write_text("seen\n")
        script = f'cat {host.dir}/marker && echo mine > "$TMPDIR/written" && hostname && ls /tmp/{home.name}'
        env = {**os.environ, **cluster.env(host)}
        done = subprocess.run(
            netns.wrap(host, ["sh", "-c", script]), env=env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["seen", "trainer-2", "checkout"]  # /tmp is the machine's: nothing hidden
        assert (host.tmp / "written").read_text() == "mine\n"  # its scratch is its own
        assert not netns.private_tmp(host)
    finally:
        import shutil

        shutil.rmtree(home, ignore_errors=True)


def test_status_lists_every_host_with_its_address_and_healthy_services(cluster):
    result = cli("status", "--json")
    assert result.exit_code == 0, result.output
    hosts = {h["name"]: h for h in json.loads(result.output)}
    assert set(hosts) == {h.name for h in SPEC.hosts()}
    addresses = [h["address"] for h in hosts.values()]
    assert len(set(addresses)) == len(addresses) and all(a.startswith("10.78.0.") for a in addresses)
    assert all(h["link"] == "up" and h["healthy"] for h in hosts.values())
    services = {s["name"]: s for h in hosts.values() for s in h["services"]}
    assert set(services) == {"kafka-1", "kafka-2", "kafka-3", "s3", "postgres", "mlflow", "dagster-webserver",
                             "dagster-daemon"}  # fmt: skip
    assert services["kafka-2"]["url"] == f"{hosts['broker-2']['address']}:9092"


def test_each_host_has_its_own_tmp_loopback_address_and_name(cluster):
    # its scratch dir: mounted over /tmp, or its TMPDIR where the checkout lives under /tmp (netns.private_tmp)
    marker = f"ppt-{uuid.uuid4().hex}"
    assert cluster.exec("trainer-1", ["sh", "-c", f'echo one > "$TMPDIR/{marker}"']).returncode == 0
    assert cluster.exec("trainer-2", ["sh", "-c", f'test -e "$TMPDIR/{marker}"']).returncode == 1
    assert (SPEC.root / "hosts" / "trainer-1" / "tmp" / marker).read_text() == "one\n"
    # 127.0.0.1 on a host is its own loopback: the shared stack's broker port there is closed
    probe = "import socket; print(socket.socket().connect_ex(('127.0.0.1', 19092)))"
    done = cluster.exec("trainer-1", [sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip() != "0"
    done = cluster.exec("trainer-1", ["ip", "-4", "-o", "addr", "show", "dev", "eth0"], capture_output=True, text=True)
    assert f"inet {cluster.host('trainer-1').address}/24" in done.stdout
    done = cluster.exec("trainer-1", ["ip", "route", "show", "default"], capture_output=True, text=True)
    assert done.stdout.strip() == ""  # no way out of the subnet
    # its own hostname, and the others' names resolve to their addresses (what torchrun's rendezvous relies on)
    names = "hostname; getent hosts trainer-2 broker-3"
    done = cluster.exec("trainer-1", ["sh", "-c", names], capture_output=True, text=True)
    assert done.stdout.split() == ["trainer-1", "10.78.0.32", "trainer-2", "10.78.0.13", "broker-3"]


def test_produce_on_one_trainer_consume_on_the_other(cluster):
    sent = on_host(cluster, "trainer-1", "produce", TOPIC, "20", "--tag", "before")
    assert sent["topic"]["replication_factor"] == 3 and sent["topic"]["min.insync.replicas"] == "2"
    assert sent["acks"] == "all" and sent["delivered"] == 20 and sent["errors"] == []
    got = on_host(cluster, "trainer-2", "consume", TOPIC)
    assert got["values"] == sorted(f"before-{i}" for i in range(20))


def test_s3_put_and_get_from_a_trainer(cluster):
    answer = on_host(cluster, "trainer-1", "s3", "cluster-test/hello.txt", "across the bridge")
    assert answer == {"endpoint": f"http://{cluster.host('s3').address}:9000", "body": "across the bridge"}


def _isr_until(cluster: Cluster, wanted, timeout: float) -> dict[int, set[int]]:
    """The topic's in-sync replica sets, polled (from the operator's seat on the bridge) until `wanted` holds."""
    admin = AdminClient({"bootstrap.servers": cluster.settings().kafka_bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        partitions = admin.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        isr = {p: set(partitions[p].isrs) for p in partitions}
        if all(wanted(replicas) for replicas in isr.values()) or time.monotonic() > deadline:
            return isr
        time.sleep(1)


def test_cut_broker_others_serve_then_heal_rejoins(cluster):
    broker = cluster.service(cluster.host("broker-2"))
    (process,) = broker.processes()
    pid = process.pid
    assert cli("cut", "broker-2").exit_code == 0
    try:
        status = {h.name: h for h in cluster.status()}
        assert status["broker-2"].link == "cut" and not status["broker-2"].healthy
        assert process.pid == pid  # a partition, not a crash: the broker process lives on
        sent = on_host(cluster, "trainer-1", "produce", TOPIC, "10", "--tag", "cut", "--timeout", "90", "--existing")
        assert sent["acks"] == "all" and sent["delivered"] == 10 and sent["errors"] == []
        isr = _isr_until(cluster, lambda replicas: 2 not in replicas, timeout=30)
        assert all(2 not in replicas and len(replicas) == 2 for replicas in isr.values()), isr
    finally:
        assert cli("heal", "broker-2").exit_code == 0
    isr = _isr_until(cluster, lambda replicas: replicas == {1, 2, 3}, timeout=120)
    assert all(replicas == {1, 2, 3} for replicas in isr.values()), isr
    assert process.pid == pid
    got = on_host(cluster, "trainer-2", "consume", TOPIC)
    assert got["values"] == sorted([f"before-{i}" for i in range(20)] + [f"cut-{i}" for i in range(10)])


def test_kill_takes_every_process_of_a_host(cluster):
    # a long command on trainer-2, as a torchrun launched there would be; `exec` reports its death as a shell does
    cmd = [str(REPO_ROOT / ".venv" / "bin" / "pipeline-project"), *CLI_OPTS, "exec", "trainer-2", "--",
           "sh", "-c", "sleep 600 & sleep 600; wait"]  # fmt: skip
    running = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while len(netns.pids(cluster.host("trainer-2"))) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        victims = netns.pids(cluster.host("trainer-2"))
        assert len(victims) == 3, victims
        result = cli("kill", "trainer-2")
        assert result.exit_code == 0, result.output
        assert running.wait(timeout=20) == 128 + 9
    finally:
        running.kill()
    assert [p for p in victims if alive(p)] == []
    trainer = {h.name: h for h in cluster.status()}["trainer-2"]
    assert trainer.processes == 0 and trainer.link == "up"
    assert cluster.exec("trainer-2", ["true"]).returncode == 0  # the host itself is still there


def test_exec_passes_the_exit_code_and_the_cluster_settings(cluster):
    # through the real console script, as the multi-node training tests will launch torchrun
    done = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "pipeline-project"), *CLI_OPTS, "exec", "trainer-2", "--",
         "sh", "-c", 'echo "$PIPELINE_CLUSTER_ADDRESS $PIPELINE_KAFKA_BOOTSTRAP"; exit 7'],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 7, done.stderr
    address, bootstrap = done.stdout.split()
    assert address == cluster.host("trainer-2").address
    assert bootstrap == ",".join(f"{cluster.host(f'broker-{n}').address}:9092" for n in (1, 2, 3))


def test_down_leaves_no_namespace_link_or_process(cluster):
    pids = {pid for host in cluster.hosts.values() for pid in netns.pids(host)}
    assert pids  # the services were running
    result = cli("down")
    assert result.exit_code == 0, result.output
    assert cluster.leftovers() == []
    names = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert f"{SPEC.prefix}v-" not in names and SPEC.bridge not in names
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [line for line in namespaces.splitlines() if line.startswith(f"{SPEC.prefix}-")]
    assert [p for p in pids if alive(p)] == []
    root = str(SPEC.root)

    def of_the_cluster() -> list[int]:
        procs = psutil.process_iter(["cmdline", "status"])
        return [p.pid for p in procs if root in " ".join(p.info["cmdline"] or []) and alive(p.pid)]

    deadline = time.monotonic() + 15  # a client the test started may still be exiting after its host went away
    while of_the_cluster() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert of_the_cluster() == []


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE  # a zombie is dead, waiting for its reaper
    except psutil.NoSuchProcess:
        return False
