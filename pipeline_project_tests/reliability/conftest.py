"""The fault tests' own stack (`stacks.throwaway_stack`), started once per session and wiped at the end.
Dagster joins it only in the module that needs it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline_project.stack import Stack
from pipeline_project_harness.reliability.faults import kafka_of, restart, wait_fully_replicated
from pipeline_project_harness.reliability.stacks import BASE_SERVICES, ROOT_PREFIXES, throwaway_stack


@pytest.fixture(scope="session")
def fault_stack() -> Iterator[Stack]:
    with throwaway_stack(ROOT_PREFIXES[0]) as stack:
        yield stack


@pytest.fixture
def healthy_stack(fault_stack: Stack) -> Stack:
    """The stack with every base service running and every Kafka partition fully replicated, whatever an earlier
    test left dead."""
    if not fault_stack.is_healthy(BASE_SERVICES):
        for service in BASE_SERVICES:
            restart(fault_stack, service)
    wait_fully_replicated(kafka_of(fault_stack), len(fault_stack.config.kafka_ports))
    return fault_stack
