"""The embedded local stack (3-broker Kafka KRaft, s3proxy, MLflow, Dagster) as plain Python; no Dagster import."""

from pipeline_project.stack.config import DEFAULT_SERVICES, SERVICES, StackConfig, default_state_dir
from pipeline_project.stack.errors import StackError
from pipeline_project.stack.kafka.tools import TOOL_ALIASES, kafka_tool, tool_command
from pipeline_project.stack.service import ServiceStatus
from pipeline_project.stack.stack import Stack, parse_services

__all__ = [
    "DEFAULT_SERVICES",
    "SERVICES",
    "TOOL_ALIASES",
    "ServiceStatus",
    "Stack",
    "StackConfig",
    "StackError",
    "default_state_dir",
    "kafka_tool",
    "parse_services",
    "tool_command",
]
