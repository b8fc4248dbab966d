"""s3proxy (S3 protocol over HTTP) with its filesystem backend, durable under the state directory (or in memory:
`StackConfig.s3_backend`)."""

from __future__ import annotations

from pipeline_project.settings import make_s3_client
from pipeline_project.stack.jars import DEPLOY_DIR, classpath, ensure_jars, java
from pipeline_project.stack.processes import ManagedProcess, http_get
from pipeline_project.stack.service import Service, ServiceStatus


def s3_client(endpoint: str, access_key: str, secret_key: str, region: str = "us-east-1"):
    """A client that gives up fast: the stack asks whether the server answers, it does not move data."""
    return make_s3_client(endpoint, access_key, secret_key, region, max_attempts=2, connect_timeout=2, read_timeout=10)


LOGBACK_XML = DEPLOY_DIR / "s3proxy" / "logback.xml"


class S3Service(Service):
    name = "s3"

    def processes(self) -> list[ManagedProcess]:
        return [
            ManagedProcess(
                name="s3",
                cmd=(
                    java(),
                    f"-Xmx{self.config.s3_heap}",
                    "-XX:+UseSerialGC",
                    f"-Dlogback.configurationFile={LOGBACK_XML}",
                    "-cp",
                    classpath("s3proxy"),
                    "org.gaul.s3proxy.Main",
                    "--properties",
                    str(self.dir / "s3proxy.properties"),
                ),
                pid_file=self.dir / "s3proxy.pid",
                log_file=self.dir / "s3proxy.log",
                ports=(self.config.s3_port,),
                env={"LOG_LEVEL": "warn"},
                stop_timeout=10.0,
            )
        ]

    def properties(self) -> dict[str, str]:
        backend = self.config.s3_backend
        if backend not in ("filesystem", "transient"):
            raise ValueError(f"s3_backend {backend!r}: filesystem or transient")
        store = {"jclouds.filesystem.basedir": str(self.dir / "data")} if backend == "filesystem" else {}
        return {
            "s3proxy.endpoint": self.config.s3_endpoint,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.config.s3_access_key,
            "s3proxy.credential": self.config.s3_secret_key,
            "s3proxy.ignore-unknown-headers": "true",
            "jclouds.provider": backend,
            **store,
        }

    def prepare(self) -> None:
        ensure_jars("s3proxy")
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        text = "".join(f"{k}={v}\n" for k, v in self.properties().items())
        (self.dir / "s3proxy.properties").write_text(text)

    def client(self):
        return s3_client(self.config.s3_endpoint, self.config.s3_access_key, self.config.s3_secret_key)

    def after_healthy(self) -> None:
        client = self.client()
        existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        for bucket in self.config.buckets:
            if bucket not in existing:
                client.create_bucket(Bucket=bucket)

    def status(self) -> list[ServiceStatus]:
        (mp,) = self.processes()
        # Unsigned requests get 403 from s3proxy: any HTTP answer means the server is up.
        answer = http_get(self.config.s3_endpoint + "/")
        return [
            ServiceStatus(
                name="s3",
                service=self.name,
                healthy=answer is not None,
                url=self.config.s3_endpoint,
                pid=mp.pid,
                detail=f"s3proxy, buckets: {', '.join(self.config.buckets)}",
            )
        ]
