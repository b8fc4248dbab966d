"""Processes the stack starts: pid files, port ownership, spawning and stopping.

A pid file records pid, create time and command line, so `stop` never kills a process that merely reused the pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from pipeline_project.stack.errors import StackError


def accepts_connections(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def port_in_use(host: str, port: int) -> bool:
    if accepts_connections(host, port):
        return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def port_owner(port: int) -> psutil.Process | None:
    """The process listening on (or bound to) `port`, when the OS lets us see it."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, PermissionError):
        return None
    for conn in connections:
        if conn.laddr and conn.laddr.port == port and conn.pid and not conn.raddr:
            try:
                return psutil.Process(conn.pid)
            except psutil.NoSuchProcess:
                continue
    return None


def describe_process(proc: psutil.Process | None) -> str:
    if proc is None:
        return "an unknown process"
    try:
        cmd = " ".join(proc.cmdline())
    except (psutil.AccessDenied, psutil.NoSuchProcess):
        cmd = proc.name() if proc.is_running() else "?"
    if len(cmd) > 80:
        cmd = cmd[:77] + "..."
    return f"pid {proc.pid} ({cmd})"


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str] | None:
    """Status and body of a GET, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read(4096).decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, ""
    except (urllib.error.URLError, OSError, TimeoutError):
        return None


@dataclass(frozen=True)
class ManagedProcess:
    """One OS process of the stack, with its pid file and log file."""

    name: str
    cmd: tuple[str, ...]
    pid_file: Path
    log_file: Path
    ports: tuple[int, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    stop_timeout: float = 20.0
    # How a clean stop starts. PostgreSQL wants SIGINT ("fast shutdown") to its postmaster alone: it stops its
    # own children, and treats a child killed from outside as a crash.
    stop_signal: int = signal.SIGTERM
    signal_children: bool = True

    # -- pid file -----------------------------------------------------------------------------------------------
    def _record(self) -> dict | None:
        try:
            return json.loads(self.pid_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def process(self) -> psutil.Process | None:
        """The live process this pid file names, if it is still the one we started."""
        record = self._record()
        if record is None:
            return None
        try:
            proc = psutil.Process(record["pid"])
            if abs(proc.create_time() - record["create_time"]) > 0.5 or proc.status() == psutil.STATUS_ZOMBIE:
                return None
        except (psutil.NoSuchProcess, psutil.AccessDenied, KeyError):
            return None
        try:
            cmdline = proc.cmdline()
        except psutil.AccessDenied:
            return proc  # its pid and start time are ours; a command line we may not read does not make it another's
        except psutil.NoSuchProcess:
            return None
        return proc if _same_command(cmdline, record["cmd"]) else None

    @property
    def pid(self) -> int | None:
        proc = self.process()
        return proc.pid if proc else None

    def is_running(self) -> bool:
        return self.process() is not None

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def check_ports_free(self, host: str) -> None:
        for port in self.ports:
            if port_in_use(host, port):
                owner = describe_process(port_owner(port))
                raise StackError(f"port {port} needed by {self.name} is already taken by {owner}")

    def spawn(self, extra_env: Mapping[str, str] | None = None) -> subprocess.Popen:
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **(self.env or {}), **(extra_env or {})}
        with open(self.log_file, "ab") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.name}\n".encode())
            log.flush()
            popen = subprocess.Popen(
                list(self.cmd),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
            )
        proc = psutil.Process(popen.pid)
        # Record the argv we launched: /proc cmdline may not be readable yet, and it equals argv for exec'd programs.
        record = {"pid": popen.pid, "create_time": proc.create_time(), "cmd": list(self.cmd)}
        self.pid_file.write_text(json.dumps(record))
        return popen

    def stop(self) -> bool:
        """SIGTERM the process and its children, SIGKILL what is left after `stop_timeout`. True if it was running."""
        proc = self.process()
        if proc is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        terminate_tree(proc, self.stop_timeout, self)
        self.pid_file.unlink(missing_ok=True)
        return True

    def tail(self, lines: int = 50) -> list[str]:
        try:
            with open(self.log_file, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 256 * 1024))
                data = f.read().decode(errors="replace")
        except FileNotFoundError:
            return []
        return data.splitlines()[-lines:]


def _same_command(actual: list[str], launched: list[str]) -> bool:
    # A script run through its shebang shows up as `python script args`: compare the arguments, not argv[0].
    args = launched[1:]
    if not args:
        return actual == launched
    # A wrapper that execs the program (setpriv) leaves the program's own argv: a tail of what we launched.
    return bool(actual) and (
        actual == launched
        or (len(actual) > len(args) and actual[len(actual) - len(args) :] == args)
        or (len(actual) < len(launched) and launched[len(launched) - len(actual) :] == actual)
    )


def _family(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _terminate(family: Sequence[psutil.Process], timeout: float, signals: Sequence[tuple[psutil.Process, int]]) -> None:
    """Send each (process, signal), wait up to `timeout` for the whole family, then SIGKILL what is left."""
    for p, sig in signals:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(sig)
    _, alive = psutil.wait_procs(family, timeout=timeout)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)


def _stop_signals(mp: ManagedProcess | None, family: list[psutil.Process]) -> list[tuple[psutil.Process, int]]:
    sig = mp.stop_signal if mp is not None else signal.SIGTERM
    targets = family if mp is None or mp.signal_children else family[:1]
    return [(p, sig) for p in targets]


def terminate_tree(proc: psutil.Process, timeout: float, mp: ManagedProcess | None = None) -> None:
    family = _family(proc) or [proc]
    _terminate(family, timeout, _stop_signals(mp, family))


def stop_all(processes: Sequence[ManagedProcess]) -> list[str]:
    """Stop several processes concurrently (Kafka brokers shut down faster together). Returns the names stopped."""
    live = [(mp, mp.process()) for mp in processes]
    live = [(mp, p) for mp, p in live if p is not None]
    families = {mp.name: _family(proc) for mp, proc in live}
    signals = [pair for mp, _ in live for pair in _stop_signals(mp, families[mp.name])]
    members = [member for family in families.values() for member in family]
    _terminate(members, max((mp.stop_timeout for mp, _ in live), default=0), signals)
    for mp in processes:
        mp.pid_file.unlink(missing_ok=True)
    return [mp.name for mp, _ in live]
