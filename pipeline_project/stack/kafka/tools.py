"""Kafka's own command-line tools (topics, metadata-quorum, perf tests, ...) run from the stack's jars."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pipeline_project.stack.errors import StackError
from pipeline_project.stack.jars import classpath, ensure_jars, java

TOOL_ALIASES = {
    "topics": "org.apache.kafka.tools.TopicCommand",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "cluster": "org.apache.kafka.tools.ClusterTool",
    "configs": "kafka.admin.ConfigCommand",
    "storage": "kafka.tools.StorageTool",
}

TOOL_LOG4J2 = """\
status = error
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
"""

# Short-lived admin tools start about twice as fast with C1 only and the serial GC; the perf tools keep the
# full JIT because benchmarks compare against them.
FAST_START_OPTS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")
FULL_JIT_TOOLS = {"org.apache.kafka.tools.ProducerPerformance", "org.apache.kafka.tools.ConsumerPerformance"}


def tool_command(classname: str, *args: str, jvm_opts: tuple[str, ...] = ()) -> list[str]:
    """argv that runs a Kafka tool class (or an alias from TOOL_ALIASES) from the stack's jars."""
    ensure_jars("kafka")
    tool_log = ensure_tool_log4j()
    main = TOOL_ALIASES.get(classname, classname)
    speed = () if main in FULL_JIT_TOOLS else FAST_START_OPTS
    return [
        java(),
        "-Xmx512m",
        *speed,
        f"-Dlog4j2.configurationFile={tool_log}",
        *jvm_opts,
        "-cp",
        classpath("kafka"),
        main,
        *args,
    ]


def ensure_tool_log4j() -> Path:
    """The tools' log4j2 config (warnings to stderr, so stdout stays the tool's answer), next to the jars."""
    path = Path(classpath("kafka")).parent / "tools-log4j2.properties"
    if not path.exists():
        path.write_text(TOOL_LOG4J2)
    return path


def kafka_tool(classname: str, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    """Run one of Kafka's own tools (class name or alias such as "topics", "metadata-quorum") and capture its output."""
    cmd = tool_command(classname, *args)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise StackError(f"kafka tool {classname} exited with {result.returncode}: {last[0]}")
    return result
