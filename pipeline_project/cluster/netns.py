"""The virtual network of the cluster, with iproute2: a bridge, one namespace and veth cable per host.

Runs as root. Nothing here routes out of the subnet: the namespaces get no default route and no NAT.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pipeline_project.cluster.topology import ClusterSpec, Host
from pipeline_project.stack.config import REPO_ROOT
from pipeline_project.stack.errors import StackError

# Runs first inside the host's namespace (as root; `ip netns exec` has just made a private mount namespace and
# `unshare --uts` a private hostname): the host gets its name, its own scratch dir becomes its /tmp, then the real
# command replaces the shell (same pid). Arguments: NAME SCRATCH COMMAND...
ON_HOST = 'hostname "$1" && mount --bind "$2" /tmp && shift 2 && exec "$@"'
# The same where a path the host needs lives under /tmp (a checkout cloned there): mounting over /tmp would hide it,
# and binding it back in would make two mounts of one filesystem, across which a rename fails (EXDEV: a checkpoint
# saved from the host's scratch into the checkout). The host keeps the machine's /tmp; its processes get their own
# scratch dir as TMPDIR (`Cluster.env`).
ON_HOST_SHARED_TMP = 'hostname "$1" && shift 2 && exec "$@"'
ETC_NETNS = Path("/etc/netns")
# `ip netns exec` mounts these over /etc/hosts and /etc/resolv.conf: names of the cluster's hosts, and no DNS server
# (none is reachable from the subnet; glibc then fails a lookup at once instead of timing out)
RESOLV_CONF = "# the cluster network has no DNS: host names are in /etc/hosts\noptions timeout:1 attempts:1\n"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise StackError(f"ip {' '.join(args)}: {(result.stderr or result.stdout).strip() or 'failed'}")
    return result


def _json(*args: str) -> list[dict]:
    out = ip("-j", *args, check=False).stdout.strip()
    return json.loads(out) if out else []


def namespaces() -> set[str]:
    return {entry["name"] for entry in _json("netns", "list")}


def link_exists(name: str) -> bool:
    return ip("link", "show", "dev", name, check=False).returncode == 0


def link_is_up(name: str) -> bool | None:
    """Whether the link is administratively up; None when it does not exist."""
    links = _json("link", "show", "dev", name)
    return ("UP" in links[0].get("flags", [])) if links else None


def wrap(host: Host, cmd: Sequence[str]) -> tuple[str, ...]:
    """argv that runs `cmd` on `host`: inside its namespace, with its own hostname and /tmp (its own TMPDIR where
    the checkout lives under /tmp: `private_tmp`)."""
    return (
        "ip",
        "netns",
        "exec",
        host.netns,
        "unshare",
        "--uts",
        "sh",
        "-c",
        ON_HOST if private_tmp(host) else ON_HOST_SHARED_TMP,
        "sh",
        host.name,
        str(host.tmp),
        *cmd,
    )


def private_tmp(host: Host) -> bool:
    """Whether the host's scratch dir can be mounted over /tmp: no path it needs lives under /tmp."""
    return not under_tmp((REPO_ROOT, host.dir, Path(sys.prefix), Path(sys.executable).parent))


def under_tmp(paths: Sequence[Path]) -> list[str]:
    """Those of `paths` that live under /tmp, less any inside another: a host's private /tmp would hide them."""
    found = sorted({Path(os.path.realpath(p)) for p in paths})
    keep: list[Path] = []
    for path in found:
        if path.is_relative_to("/tmp") and path != Path("/tmp") and not any(path.is_relative_to(k) for k in keep):
            keep.append(path)
    return [str(p) for p in keep]


def check_subnet_free(spec: ClusterSpec) -> None:
    """Refuse a subnet that overlaps an address or route of the machine (other than our own bridge)."""
    net = spec.network
    for entry in _json("-4", "addr", "show"):
        if entry.get("ifname") == spec.bridge:
            continue
        for addr in entry.get("addr_info", []):
            if ipaddress.IPv4Network(f"{addr['local']}/{addr['prefixlen']}", strict=False).overlaps(net):
                raise StackError(f"cluster subnet {net} overlaps {addr['local']} on {entry['ifname']}")
    for route in _json("-4", "route", "show"):
        dst, dev = route.get("dst", ""), route.get("dev")
        if dev != spec.bridge and dst not in ("", "default") and ipaddress.IPv4Network(dst, strict=False).overlaps(net):
            raise StackError(f"cluster subnet {net} overlaps the route to {dst} via {dev}")


def create(spec: ClusterSpec, hosts: Sequence[Host]) -> None:
    """Bridge, namespaces, cables and addresses; what exists already is kept (idempotent)."""
    if not link_exists(spec.bridge):
        check_subnet_free(spec)
        ip("link", "add", spec.bridge, "type", "bridge", "forward_delay", "0", "stp_state", "0")
        ip("addr", "add", f"{spec.gateway}/{spec.network.prefixlen}", "dev", spec.bridge)
    ip("link", "set", spec.bridge, "up")
    existing = namespaces()
    names = "".join(f"{h.address}\t{h.name}\n" for h in hosts)
    for host in hosts:
        etc = ETC_NETNS / host.netns
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "hosts").write_text(f"127.0.0.1\tlocalhost\n::1\tlocalhost\n{names}")
        (etc / "resolv.conf").write_text(RESOLV_CONF)
        if host.netns not in existing:
            ip("netns", "add", host.netns)
        ip("-n", host.netns, "link", "set", "lo", "up")
        if not link_exists(host.veth):
            ip("-n", host.netns, "link", "del", "eth0", check=False)  # a half-made host from an interrupted `up`
            ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
            ip("link", "set", host.veth, "master", spec.bridge)
            ip("-n", host.netns, "addr", "add", f"{host.address}/{spec.network.prefixlen}", "dev", "eth0")
            ip("-n", host.netns, "link", "set", "eth0", "up")
            ip("link", "set", host.veth, "up")


def set_link(host: Host, up: bool) -> None:
    """Plug (heal) or unplug (cut) the host's cable at the bridge; its processes and addresses stay as they are."""
    if not link_exists(host.veth):
        raise StackError(f"host {host.name} has no link ({host.veth}); is the cluster up?")
    ip("link", "set", host.veth, "up" if up else "down")


def pids(host: Host) -> list[int]:
    """Every process inside the host's namespace."""
    if host.netns not in namespaces():
        return []
    out = ip("netns", "pids", host.netns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def kill(host: Host, timeout: float = 10.0) -> list[int]:
    """SIGKILL every process of the host; returns their pids once they are gone."""
    killed = pids(host)
    for pid in killed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while pids(host) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = pids(host)
    if left:
        raise StackError(f"processes {left} of host {host.name} survived SIGKILL")
    return killed


def delete(spec: ClusterSpec, hosts: Sequence[Host]) -> None:
    """Remove cables, namespaces and the bridge (after `kill`: a namespace lives on while a process is in it)."""
    existing = namespaces()
    for host in hosts:
        if link_exists(host.veth):
            ip("link", "del", host.veth)  # takes its peer, the host's eth0, with it
        if host.netns in existing:
            ip("netns", "del", host.netns)
        shutil.rmtree(ETC_NETNS / host.netns, ignore_errors=True)
    if link_exists(spec.bridge):
        ip("link", "del", spec.bridge)
    with contextlib.suppress(OSError):
        ETC_NETNS.rmdir()  # only when no other namespace keeps files there


def leftovers(spec: ClusterSpec, hosts: Sequence[Host]) -> list[str]:
    """Namespaces and links of this cluster that still exist (empty after a clean `down`)."""
    found = [f"netns {h.netns}" for h in hosts if h.netns in namespaces()]
    found += [f"link {name}" for name in [spec.bridge, *(h.veth for h in hosts)] if link_exists(name)]
    found += [str(ETC_NETNS / h.netns) for h in hosts if (ETC_NETNS / h.netns).exists()]
    return found
