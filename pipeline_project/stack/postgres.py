"""PostgreSQL from Debian's package: one server for the dedup index and Dagster's storage.

The cluster lives under the state directory (`postgres/data`), so it survives `stack down` and goes with
`down --wipe`. As root the server runs as the `postgres` user that Debian's package creates (PostgreSQL
refuses to run as root). When that user cannot reach the state directory (a checkout in a mode-700 home such as
/root), the server's files live in a directory of their own under `SERVER_HOME`, keyed by the state directory.
"""

from __future__ import annotations

import glob
import grp
import hashlib
import ipaddress
import os
import pwd
import shutil
import signal
import subprocess
from pathlib import Path

from pipeline_project.common.postgres import SERVER_KEEPALIVES
from pipeline_project.settings import LOCAL_POSTGRES_DATABASES, LOCAL_POSTGRES_PASSWORD, LOCAL_POSTGRES_USER
from pipeline_project.stack.errors import StackError
from pipeline_project.stack.processes import ManagedProcess, accepts_connections
from pipeline_project.stack.service import Service, ServiceStatus

RUN_AS = "postgres"
SERVER_HOME = Path("/var/lib/pipeline-project/postgres")
SAMENET_RULE = "host all all samenet scram-sha-256"


def postgres_bindir() -> Path:
    """Where `postgres` and `initdb` are: PATH first, then Debian's /usr/lib/postgresql/<newest>/bin."""
    found = shutil.which("postgres")
    if found:
        return Path(os.path.realpath(found)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if not candidates:
        raise StackError("PostgreSQL is not installed: run scripts/setup.sh (it installs Debian's postgresql)")
    return Path(candidates[-1]).parent


def _as_server_user() -> tuple[str, ...]:
    """argv prefix that drops root to the postgres user (setpriv execs, so the pid stays the server's)."""
    if os.geteuid() != 0:
        return ()
    try:
        pwd.getpwnam(RUN_AS)
    except KeyError:
        raise StackError(f"running as root needs a {RUN_AS!r} user (Debian's postgresql package creates it)") from None
    return ("setpriv", f"--reuid={RUN_AS}", f"--regid={RUN_AS}", "--init-groups", "--")


def reachable_by(path: Path, user: str) -> bool:
    """Whether `user` may traverse every existing directory above `path` (mode bits; ACLs are not read)."""
    account = pwd.getpwnam(user)
    groups = {account.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    for parent in Path(os.path.realpath(path)).parents:
        try:
            st = parent.stat()
        except FileNotFoundError:
            continue  # made later by root with the default mode
        if account.pw_uid == 0:
            continue
        bit = 0o100 if st.st_uid == account.pw_uid else 0o010 if st.st_gid in groups else 0o001
        if not st.st_mode & bit:
            return False
    return True


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class PostgresService(Service):
    name = "postgres"

    @property
    def server_dir(self) -> Path:
        """The server's own files (data, socket): under the state dir when the server's user can reach it."""
        if os.geteuid() != 0 or reachable_by(self.dir, RUN_AS):
            return self.dir
        return SERVER_HOME / hashlib.sha256(str(self.dir.resolve()).encode()).hexdigest()[:16]

    @property
    def data_dir(self) -> Path:
        return self.server_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.server_dir / "run"

    def data_dirs(self) -> list:
        return list(dict.fromkeys([self.dir, self.server_dir]))

    def processes(self) -> list[ManagedProcess]:
        cfg = self.config
        cmd = (
            *_as_server_user(),
            str(postgres_bindir() / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(cfg.postgres_port),
            "-k",
            str(self.socket_dir),
            "-c",
            f"listen_addresses={cfg.address('postgres')}",
            "-c",
            "max_connections=200",
            "-c",
            "shared_buffers=64MB",
            *(arg for name, value in SERVER_KEEPALIVES.items() for arg in ("-c", f"{name}={value}")),
        )
        return [
            ManagedProcess(
                name="postgres",
                cmd=cmd,
                pid_file=self.dir / "postgres.pid",
                log_file=self.dir / "postgres.log",
                ports=(cfg.postgres_port,),
                stop_timeout=30.0,
                stop_signal=signal.SIGINT,
                signal_children=False,
            )
        ]

    def _run(self, *argv: str) -> subprocess.CompletedProcess:
        result = subprocess.run([*_as_server_user(), *argv], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise StackError(f"{Path(argv[0]).name} failed: {last[0]}")
        return result

    def prepare(self) -> None:
        for d in (self.dir, self.server_dir, self.socket_dir):
            d.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam(RUN_AS)
            for d in (self.dir, self.server_dir, self.socket_dir):
                os.chown(d, user.pw_uid, user.pw_gid)
            if self.data_dir.exists():
                os.chown(self.data_dir, user.pw_uid, user.pw_gid)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._allow_own_subnet()

    def _allow_own_subnet(self) -> None:
        # initdb's pg_hba.conf admits TCP logins from loopback only: a server on a network address (a cluster host)
        # also takes password logins from the hosts of its own subnet ("samenet").
        if _is_loopback(self.config.address("postgres")):
            return
        hba = self.data_dir / "pg_hba.conf"
        if SAMENET_RULE not in hba.read_text().splitlines():
            with open(hba, "a") as handle:
                handle.write(SAMENET_RULE + "\n")

    def _initdb(self) -> None:
        pwfile = self.server_dir / ".pwfile"
        pwfile.write_text(LOCAL_POSTGRES_PASSWORD + "\n")
        if os.geteuid() == 0:
            os.chown(pwfile, pwd.getpwnam(RUN_AS).pw_uid, -1)
        try:
            self._run(
                str(postgres_bindir() / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                LOCAL_POSTGRES_USER,
                f"--pwfile={pwfile}",
                "--auth-host=scram-sha-256",
                "--auth-local=trust",
                "-E",
                "UTF8",
                "--locale=C",
            )
        except StackError as err:
            raise StackError(f"{err} (is {self.server_dir} reachable by the {RUN_AS!r} user?)") from None
        finally:
            pwfile.unlink(missing_ok=True)

    def after_healthy(self) -> None:
        import psycopg2

        conn = psycopg2.connect(self.config.postgres_url("postgres"))
        conn.autocommit = True  # CREATE DATABASE cannot run in a transaction
        try:
            with conn.cursor() as cur:
                for db in LOCAL_POSTGRES_DATABASES:
                    cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,))
                    if cur.fetchone() is None:
                        cur.execute(f'CREATE DATABASE "{db}"')
        finally:
            conn.close()

    def status(self) -> list[ServiceStatus]:
        (mp,) = self.processes()
        cfg = self.config
        healthy = accepts_connections(cfg.address("postgres"), cfg.postgres_port) and self._answers()
        return [
            ServiceStatus(
                name="postgres",
                service=self.name,
                healthy=healthy,
                url=f"postgresql://{cfg.address('postgres')}:{cfg.postgres_port}",
                pid=mp.pid,
                detail=f"databases: {', '.join(LOCAL_POSTGRES_DATABASES)}" if healthy else "",
            )
        ]

    def _answers(self) -> bool:
        import psycopg2

        try:
            psycopg2.connect(self.config.postgres_url("postgres"), connect_timeout=2).close()
            return True
        except psycopg2.Error:
            return False
