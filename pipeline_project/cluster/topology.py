"""Which hosts the cluster has, their addresses on the virtual network, and the stack config each one runs."""

from __future__ import annotations

import dataclasses
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from pipeline_project.stack.config import REPO_ROOT, StackConfig
from pipeline_project.stack.errors import StackError

# Every service listens on its own host's address, so each keeps its usual port.
PORTS = {"kafka": 9092, "kafka_controller": 9093, "s3": 9000, "postgres": 5432, "mlflow": 5000, "dagster": 3000}
# host name suffix -> (last octet of its address, the stack service it runs or None for a bare host)
LAYOUT = {
    "broker-1": (11, "kafka"),
    "broker-2": (12, "kafka"),
    "broker-3": (13, "kafka"),
    "s3": (21, "s3"),
    "postgres": (22, "postgres"),
    "mlflow": (23, "mlflow"),
    "dagster": (24, "dagster"),
    "trainer-1": (31, None),
    "trainer-2": (32, None),
}
IFNAMSIZ = 15  # the kernel's limit on an interface name


def default_root() -> Path:
    return REPO_ROOT / ".cluster"


@dataclass(frozen=True)
class Host:
    """One machine of the cluster: a network namespace with one address and a scratch directory of its own."""

    name: str
    address: str
    service: str | None
    netns: str
    veth: str
    """The bridge-side end of its cable; `cut` takes it down."""
    dir: Path

    @property
    def node(self) -> int | None:
        """The Kafka node id of a broker host."""
        return int(self.name.rsplit("-", 1)[1]) if self.service == "kafka" else None

    @property
    def tmp(self) -> Path:
        """Mounted over /tmp for every process of this host."""
        return self.dir / "tmp"

    @property
    def work(self) -> Path:
        """Working directory of `exec` and of processes that name none."""
        return self.dir / "work"

    @property
    def state(self) -> Path:
        """The stack state dir of the service on this host."""
        return self.dir / "state"


@dataclass(frozen=True)
class ClusterSpec:
    """Names and addresses of one cluster; two specs with other prefixes and subnets can run side by side."""

    root: Path = dataclasses.field(default_factory=default_root)
    prefix: str = "pp"
    subnet: str = "10.77.0.0/24"

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).expanduser().resolve())
        net = self.network
        if net.prefixlen != 24 or not net.is_private:
            raise StackError(f"cluster subnet {self.subnet} must be a private /24 (e.g. 10.77.0.0/24)")
        longest = max(len(self.bridge), *(len(self._veth(n)) for n in LAYOUT))
        if longest > IFNAMSIZ or not self.prefix.isalnum():
            raise StackError(f"cluster prefix {self.prefix!r} must be alphanumeric and short (interface names <= 15)")

    @property
    def network(self) -> ipaddress.IPv4Network:
        try:
            return ipaddress.IPv4Network(self.subnet)
        except ValueError as err:
            raise StackError(f"cluster subnet {self.subnet!r}: {err}") from None

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br0"

    @property
    def gateway(self) -> str:
        """The machine's own namespace on the bridge (the operator's seat: `status` probes from it); not a router."""
        return str(self.network.network_address + 1)

    def _veth(self, name: str) -> str:
        return f"{self.prefix}v-{name}"

    def hosts(self) -> list[Host]:
        base = self.network.network_address
        return [
            Host(
                name=name,
                address=str(base + octet),
                service=service,
                netns=f"{self.prefix}-{name}",
                veth=self._veth(name),
                dir=self.root / "hosts" / name,
            )
            for name, (octet, service) in LAYOUT.items()
        ]

    def addresses(self) -> dict[str, str]:
        """StackConfig's role -> address map: "kafka-N" for broker-N, the service name for the others."""
        roles = {}
        for host in self.hosts():
            if host.service == "kafka":
                roles[f"kafka-{host.node}"] = host.address
            elif host.service:
                roles[host.service] = host.address
        return roles

    def stack_config(self) -> StackConfig:
        """The whole cluster as the stack sees it: what clients are told (`settings()`, `client_env()`)."""
        brokers = sum(1 for h in self.hosts() if h.service == "kafka")
        return StackConfig(
            state_dir=self.root,
            host=self.gateway,
            addresses=self.addresses(),
            kafka_ports=(PORTS["kafka"],) * brokers,
            kafka_controller_ports=(PORTS["kafka_controller"],) * brokers,
            s3_port=PORTS["s3"],
            postgres_port=PORTS["postgres"],
            mlflow_port=PORTS["mlflow"],
            dagster_port=PORTS["dagster"],
            kafka_security="plaintext",
        )

    def host_config(self, host: Host) -> StackConfig:
        """What the service of `host` runs with: its state under the host's own directory, bound to its address."""
        nodes = (host.node,) if host.node is not None else None
        return dataclasses.replace(self.stack_config(), state_dir=host.state, host=host.address, kafka_nodes=nodes)
