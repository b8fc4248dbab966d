"""The Kafka security profiles of the local stack: `plaintext` (the default) and `sasl_ssl`.

`sasl_ssl`:
- The client listener (the broker ports) is SASL_SSL and nothing else: a PLAINTEXT client is refused there.
  It accepts SCRAM-SHA-512, SCRAM-SHA-256 and PLAIN; a client picks one with KAFKA_SASL_MECHANISM.
- Brokers replicate to each other over the same SASL_SSL listener, as the SCRAM-SHA-512 user `broker`.
- The KRaft controller listener stays PLAINTEXT, bound to loopback only (Kafka cannot check SCRAM credentials
  on the controller listener: they live in the metadata that listener serves).
- TLS: a CA and a broker certificate made by the project (`tls.py`), under `<state>/kafka/tls/`.
- Users: SCRAM credentials written into the metadata log by Kafka's own StorageTool when it formats storage
  (`--add-scram`); more can be added later with `kafka-tool configs --alter --add-config SCRAM-SHA-512=[...]`.
  Passwords are random, one file each (mode 0600) under `<state>/kafka/credentials/`.
No authorizer runs: the profile authenticates and encrypts; it does not restrict what a logged-in user may do.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from pipeline_project.stack.errors import StackError
from pipeline_project.stack.tls import TlsFiles, ensure_certificates, write_private

PLAINTEXT = "plaintext"
SASL_SSL = "sasl_ssl"
PROFILES = (PLAINTEXT, SASL_SSL)
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
DEFAULT_SASL_MECHANISM = "SCRAM-SHA-512"
INTER_BROKER_MECHANISM = "SCRAM-SHA-512"
CLIENT_USER = "pipeline"
BROKER_USER = "broker"

SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def check_profile(profile: str | None, source: str) -> str | None:
    if profile is not None and profile not in PROFILES:
        raise StackError(f"{source}={profile!r} is not a Kafka security profile; choose from {', '.join(PROFILES)}")
    return profile


def check_mechanism(mechanism: str, source: str) -> str:
    if mechanism not in SASL_MECHANISMS:
        raise StackError(f"{source}={mechanism!r} is not a SASL mechanism; choose from {', '.join(SASL_MECHANISMS)}")
    return mechanism


def recorded_profile(kafka_dir: Path) -> str | None:
    """The profile the Kafka storage under `kafka_dir` was formatted for; None before the first format."""
    try:
        formatted = json.loads((kafka_dir / "storage.json").read_text())
    except FileNotFoundError:
        return None
    return formatted.get("security", PLAINTEXT)  # state dirs formatted before profiles existed are plaintext


def _jaas(module: str, **options: str) -> str:
    return f"{module} required" + "".join(f' {k}="{v}"' for k, v in options.items()) + ";"


@dataclass(frozen=True)
class KafkaSecurity:
    """The `sasl_ssl` profile's files under one state directory's `kafka/` and the configs built from them."""

    kafka_dir: Path

    @property
    def tls(self) -> TlsFiles:
        return TlsFiles(self.kafka_dir / "tls")

    @property
    def ca_location(self) -> Path:
        return self.tls.ca_cert

    def password_file(self, user: str) -> Path:
        return self.kafka_dir / "credentials" / f"{user}.password"

    @property
    def client_properties(self) -> Path:
        """A Java client config (`--command-config`) logged in as the client user: for Kafka's own tools."""
        return self.kafka_dir / "client.properties"

    def password(self, user: str = CLIENT_USER) -> str | None:
        try:
            return self.password_file(user).read_text().strip() or None
        except FileNotFoundError:
            return None

    def _required_password(self, user: str) -> str:
        password = self.password(user)
        if password is None:
            raise StackError(f"{self.password_file(user)} is missing; run `pipeline-project stack up --secure` first")
        return password

    # -- preparing ------------------------------------------------------------------------------------------------
    def ensure(self, hosts: tuple[str, ...], mechanism: str) -> None:
        """Certificates, passwords (kept once made) and the tools' client config; idempotent."""
        ensure_certificates(self.tls.dir, hosts)
        for user in (CLIENT_USER, BROKER_USER):
            if self.password(user) is None:
                # url-safe characters only: they need no quoting in JAAS strings or StorageTool's [name=...] syntax
                write_private(self.password_file(user), secrets.token_urlsafe(24) + "\n")
        write_private(self.client_properties, self.java_client_properties(mechanism))

    def scram_format_args(self) -> list[str]:
        """`kafka-storage format` arguments that create the client and broker users' SCRAM credentials."""
        args = []
        for user in (CLIENT_USER, BROKER_USER):
            password = self._required_password(user)
            for mechanism in SCRAM_MECHANISMS:
                args += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        return args

    # -- broker side ----------------------------------------------------------------------------------------------
    def broker_properties(self, host: str, port: int, cport: int) -> dict[str, str]:
        broker_password = self._required_password(BROKER_USER)
        client_password = self._required_password(CLIENT_USER)
        return {
            "listeners": f"SASL_SSL://{host}:{port},CONTROLLER://{host}:{cport}",
            "advertised.listeners": f"SASL_SSL://{host}:{port},CONTROLLER://{host}:{cport}",
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
            "sasl.mechanism.inter.broker.protocol": INTER_BROKER_MECHANISM,
            # the broker logs in to its peers with this one; the SCRAM users themselves live in the metadata log
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _jaas(
                SCRAM_LOGIN, username=BROKER_USER, password=broker_password
            ),
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": _jaas(SCRAM_LOGIN),
            # PLAIN's users are the broker's static list (no tool manages them): the client user only
            "listener.name.sasl_ssl.plain.sasl.jaas.config": _jaas(
                PLAIN_LOGIN, **{f"user_{CLIENT_USER}": client_password}
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.tls.broker_keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls.ca_cert),
            "ssl.client.auth": "none",
            "ssl.endpoint.identification.algorithm": "https",
        }

    # -- client side ----------------------------------------------------------------------------------------------
    def java_client_properties(self, mechanism: str) -> str:
        module = PLAIN_LOGIN if mechanism == "PLAIN" else SCRAM_LOGIN
        props = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": _jaas(module, username=CLIENT_USER, password=self._required_password(CLIENT_USER)),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.tls.ca_cert),
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def librdkafka_config(self, mechanism: str) -> dict[str, str]:
        """What a confluent-kafka client of this profile adds to `bootstrap.servers` (the stack's health probes)."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": CLIENT_USER,
            "sasl.password": self._required_password(CLIENT_USER),
            "ssl.ca.location": str(self.tls.ca_cert),
        }

    def client_env(self, mechanism: str) -> dict[str, str]:
        """The variables `Settings` and `build_resources` read to reach this profile's brokers (the password is
        empty until `ensure` has made it)."""
        return {
            "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KAFKA_SASL_MECHANISM": mechanism,
            "KAFKA_SASL_USERNAME": CLIENT_USER,
            "KAFKA_SASL_PASSWORD": self.password(CLIENT_USER) or "",
            "KAFKA_SSL_CA_LOCATION": str(self.tls.ca_cert),
        }
