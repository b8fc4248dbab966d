"""A cluster of hosts on one machine, each running the stack's own service definitions inside its namespace."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipeline_project.cluster import netns
from pipeline_project.cluster.topology import ClusterSpec, Host
from pipeline_project.settings import Settings
from pipeline_project.stack.dagster import DagsterService
from pipeline_project.stack.errors import StackError
from pipeline_project.stack.kafka.cluster import KafkaService, kafka_uuid
from pipeline_project.stack.mlflow import MlflowService
from pipeline_project.stack.postgres import PostgresService
from pipeline_project.stack.processes import ManagedProcess, stop_all
from pipeline_project.stack.s3 import S3Service
from pipeline_project.stack.service import Service, ServiceStatus

SERVICE_CLASSES: dict[str, type[Service]] = {
    "kafka": KafkaService,
    "s3": S3Service,
    "postgres": PostgresService,
    "mlflow": MlflowService,
    "dagster": DagsterService,
}
# Dagster's storage lives in PostgreSQL: it starts once the server answers and its databases exist.
FIRST_WAVE = ("postgres", "s3", "mlflow", "kafka")
# Chains stop side by side, each in order: Dagster and MLflow before the stores they write to; brokers one after
# another, highest id first (as `KafkaService.stop` does on one host: a majority of voters stays for each but the last).
STOP_CHAINS = (("dagster", "postgres"), ("mlflow", "s3"), ("kafka",))

Progress = Callable[[str], None]


def _noop(_: str) -> None:
    pass


@dataclass
class HostStatus:
    name: str
    address: str
    link: str
    """"up", "cut" or "missing" (no namespace: the cluster is down)."""
    processes: int
    services: list[ServiceStatus] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return self.link == "up" and all(s.healthy for s in self.services)

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        return {**data, "healthy": self.healthy, "services": [s.to_dict() for s in self.services]}


class Cluster:
    """`up`, `down`, `status`, `cut`, `heal`, `kill` and `exec` over the hosts of one `ClusterSpec`."""

    def __init__(self, spec: ClusterSpec | None = None) -> None:
        self.spec = spec or ClusterSpec()
        self.hosts = {h.name: h for h in self.spec.hosts()}

    def host(self, name: str) -> Host:
        if name not in self.hosts:
            raise StackError(f"no cluster host {name!r}; choose from {', '.join(self.hosts)}")
        return self.hosts[name]

    def service(self, host: Host) -> Service | None:
        return SERVICE_CLASSES[host.service](self.spec.host_config(host)) if host.service else None

    def settings(self) -> Settings:
        """Client settings of the cluster: every address is a host's address on the virtual network."""
        return self.spec.stack_config().settings()

    def env(self, host: Host) -> dict[str, str]:
        """What a process on `host` gets on top of the caller's environment: the cluster's client settings."""
        return {
            **self.spec.stack_config().client_env(),
            "PIPELINE_CLUSTER_HOST": host.name,
            "PIPELINE_CLUSTER_ADDRESS": host.address,
            "PIPELINE_PUSHGATEWAY_URL": "off",  # no Prometheus host in the cluster; never the loopback default
            "TMPDIR": "/tmp" if netns.private_tmp(host) else str(host.tmp),  # the host's own (netns.ON_HOST)
        }

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def up(self, timeout: float = 180.0, progress: Progress = _noop) -> list[str]:
        """Create the network and start every service that is not running; wait until all are healthy."""
        with self._lock():
            hosts = list(self.hosts.values())
            for host in hosts:
                for d in (host.tmp, host.work, host.state):
                    d.mkdir(parents=True, exist_ok=True)
                host.tmp.chmod(0o1777)
            netns.create(self.spec, hosts)
            progress(f"network: {self.spec.bridge} {self.spec.network}, {len(hosts)} hosts")
            self._seed_kafka_layout()
            launched: dict[str, tuple[Host, subprocess.Popen]] = {}
            try:
                self._start_wave(FIRST_WAVE, launched, progress)
                self._wait_healthy(["postgres"], launched, timeout, progress)
                self._start_wave(("dagster",), launched, progress)
                self._wait_healthy(list(SERVICE_CLASSES), launched, timeout, progress)
            except BaseException:
                stop_all([mp for name, (host, _) in launched.items() for mp in self._processes(host, name)])
                raise
            return list(launched)

    def _processes(self, host: Host, name: str | None = None) -> list[ManagedProcess]:
        service = self.service(host)
        return [mp for mp in (service.processes() if service else []) if name is None or mp.name == name]

    def _hosts_of(self, services: Sequence[str]) -> list[Host]:
        return [h for s in services for h in self.hosts.values() if h.service == s]

    def _start_wave(self, services: Sequence[str], launched: dict, progress: Progress) -> None:
        """Prepare and start each host's missing processes, every host on its own thread (a broker's storage
        format does not hold back the S3 server)."""
        todo = [(h, [mp for mp in self._processes(h) if not mp.is_running()]) for h in self._hosts_of(services)]
        todo = [(h, missing) for h, missing in todo if missing]
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(todo) or 1) as pool:
            futures = [pool.submit(self._start_host, host, missing, progress) for host, missing in todo]
        errors = [f.exception() for f in futures if f.exception() is not None]
        for future in futures:
            for name, popen, host in [] if future.exception() else future.result():
                launched[name] = (host, popen)  # what did start is stopped again if another host failed
        if errors:
            raise errors[0]

    def _start_host(self, host: Host, missing: list[ManagedProcess], progress: Progress) -> list:
        self.service(host).prepare()
        progress(f"{host.name} ({host.address}): starting {', '.join(mp.name for mp in missing)}")
        # Built again after prepare, as `Stack` does: what prepare made can change the processes' arguments
        prepared = {mp.name: mp for mp in self._processes(host)}
        return [(mp.name, self._spawn(host, prepared[mp.name]), host) for mp in missing]

    def _spawn(self, host: Host, mp: ManagedProcess) -> subprocess.Popen:
        wrapped = dataclasses.replace(
            mp, cmd=netns.wrap(host, mp.cmd), env={**self.env(host), **(mp.env or {})}, cwd=mp.cwd or host.work
        )
        return wrapped.spawn()

    def _wait_healthy(self, services: list[str], launched: dict, timeout: float, progress: Progress) -> None:
        deadline = time.monotonic() + timeout
        pending = self._hosts_of(services)
        while pending:
            for name, (host, popen) in launched.items():
                code = popen.poll()
                if code is not None:
                    (mp,) = self._processes(host, name)
                    last = next((line for line in reversed(mp.tail(40)) if line.strip()), "no output")
                    raise StackError(f"{name} on {host.name} exited with code {code} ({mp.log_file}): {last.strip()}")
            for host in list(pending):
                service = self.service(host)
                if service.is_healthy():
                    service.after_healthy()
                    pending.remove(host)
                    progress(f"{host.name}: {service.name} healthy")
            if pending and time.monotonic() > deadline:
                names = ", ".join(h.name for h in pending)
                raise StackError(f"not healthy after {timeout:.0f}s: {names}; see `pipeline-project cluster logs`")
            if pending:
                time.sleep(0.5)

    def _seed_kafka_layout(self) -> None:
        """One cluster id and voter set for every broker host, as an operator hands them to each machine."""
        brokers = self._hosts_of(["kafka"])
        files = [h.state / "kafka" / "storage.json" for h in brokers]
        existing = next((f for f in files if f.exists()), None)
        if existing is not None:
            layout = json.loads(existing.read_text())
        else:
            cfg = self.spec.stack_config()
            controllers = [f"{h}:{p}" for h, p in zip(cfg.kafka_hosts, cfg.kafka_controller_ports, strict=True)]
            layout = {
                "cluster_id": kafka_uuid(),
                "directory_ids": {str(h.node): kafka_uuid() for h in brokers},
                "layout": {"controllers": controllers, "nodes": [h.node for h in brokers]},
                "security": cfg.kafka_profile,
            }
        for f in files:
            if not f.exists():
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(json.dumps(layout, indent=2))

    def down(self, wipe: bool = False, progress: Progress = _noop) -> list[str]:
        """Stop every service, SIGKILL what is left on each host, delete namespaces, cables and bridge."""
        with self._lock():
            stopped = []
            chains = [[h for s in chain for h in reversed(self._hosts_of([s]))] for chain in STOP_CHAINS]
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(chains)) as pool:
                for names in pool.map(lambda chain: self._stop_chain(chain, progress), chains):
                    stopped += names
            for host in self.hosts.values():
                if netns.kill(host):
                    progress(f"{host.name}: killed what was left")
            netns.delete(self.spec, list(self.hosts.values()))
            progress(f"network: {self.spec.bridge} and {len(self.hosts)} namespaces deleted")
            if wipe:
                for host in self.hosts.values():
                    service = self.service(host)
                    for path in service.data_dirs() if service is not None else []:
                        shutil.rmtree(path, ignore_errors=True)  # some live outside the host's dir (postgres)
                shutil.rmtree(self.spec.root / "hosts", ignore_errors=True)
                progress(f"state wiped ({self.spec.root / 'hosts'})")
            return stopped

    def _stop_chain(self, hosts: list[Host], progress: Progress) -> list[str]:
        stopped = []
        for host in hosts:
            if host.netns in netns.namespaces():
                names = self.service(host).stop()
                if names:
                    progress(f"{host.name}: stopped {', '.join(names)}")
                stopped += names
        return stopped

    def leftovers(self) -> list[str]:
        return netns.leftovers(self.spec, list(self.hosts.values()))

    @contextlib.contextmanager
    def _lock(self):
        self.spec.root.mkdir(parents=True, exist_ok=True)
        with open(self.spec.root / ".lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    # -- faults and commands ---------------------------------------------------------------------------------------
    def cut(self, name: str) -> None:
        netns.set_link(self.host(name), up=False)

    def heal(self, name: str) -> None:
        netns.set_link(self.host(name), up=True)

    def kill(self, name: str) -> list[int]:
        return netns.kill(self.host(name))

    def exec(self, name: str, argv: Sequence[str], **run_kwargs) -> subprocess.CompletedProcess:
        """Run `argv` on the host (its namespace, its /tmp, its work dir) with the cluster's settings."""
        host = self.host(name)
        if host.netns not in netns.namespaces():
            raise StackError(f"host {name} does not exist; run `pipeline-project cluster up`")
        env = {**os.environ, **self.env(host)}
        return subprocess.run(netns.wrap(host, argv), env=env, cwd=host.work, check=False, **run_kwargs)

    # -- inspect ---------------------------------------------------------------------------------------------------
    def status(self) -> list[HostStatus]:
        present = netns.namespaces()
        result = []
        for host in self.hosts.values():
            up = netns.link_is_up(host.veth)
            link = "missing" if host.netns not in present or up is None else ("up" if up else "cut")
            service = self.service(host)
            services = service.status() if service is not None and link != "missing" else []
            result.append(HostStatus(host.name, host.address, link, len(netns.pids(host)), services))
        return result

    def logs(self, name: str, lines: int = 50) -> dict[str, list[str]]:
        return {mp.name: mp.tail(lines) for mp in self._processes(self.host(name))}
