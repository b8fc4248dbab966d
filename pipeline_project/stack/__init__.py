"""The embedded local stack (3-broker Kafka KRaft, s3proxy, MLflow, Dagster) as plain Python; no Dagster import."""

from .config import DEFAULT_SERVICES, SERVICES, StackConfig, default_state_dir
from .errors import StackError
from .kafka_tools import TOOL_ALIASES, kafka_tool, tool_command
from .service import ServiceStatus
from .stack import Stack, parse_services

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
