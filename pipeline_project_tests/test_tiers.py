"""The suite's tiers come from a test's fixtures and marks, never its folder (conftest.py, `tier_of`), and the tests
of one shared process land in one pytest-xdist group."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipeline_project_tests.conftest import REPO_ROOT, tier_of


@pytest.mark.parametrize(
    ("fixtures", "marks", "tier"),
    [
        (set(), set(), None),
        ({"tmp_path", "monkeypatch"}, set(), None),
        ({"stack"}, set(), "integration"),
        ({"pg_url", "stack", "local_stack"}, set(), "integration"),
        (set(), {"stack"}, "integration"),  # starts services of its own
        ({"secure"}, set(), "integration"),
        ({"fault_stack", "healthy_stack"}, set(), "fault"),
        ({"cluster", "stack"}, set(), "cluster"),
    ],
)
def test_a_tier_follows_from_fixtures_and_marks(fixtures, marks, tier):
    assert tier_of(fixtures, marks) == tier


def _collected(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [line for line in out.splitlines() if "::" in line]


def test_pure_tests_in_a_service_folder_are_in_the_fast_tier():
    fast = _collected(
        "-m", "not integration and not fault and not cluster", "pipeline_project_tests/stack/test_units.py"
    )
    assert len(fast) == 15  # every test of the file: none needs a service


def test_the_tests_of_the_shared_dagster_share_one_group():
    """Collected with their marks: every test that uses `stack_dagster` (the UI tests, the doctor) is in the
    `dagster` xdist group, so the webserver starts once and no parallel test stops it."""
    code = (
        "import pytest, sys\n"
        "class P:\n"
        "    def pytest_collection_finish(self, session):\n"
        "        for i in session.items:\n"
        "            g = [m.args[0] for m in i.iter_markers('xdist_group')]\n"
        "            print('GROUP', i.nodeid, 'stack_dagster' in i.fixturenames, g)\n"
        "sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', 'pipeline_project_tests/ui',\n"
        "                      'pipeline_project_tests/operations/test_doctor.py'], plugins=[P()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    rows = [line.split(" ", 2)[1:] for line in out.stdout.splitlines() if line.startswith("GROUP ")]
    uses = [nodeid for nodeid, rest in rows if rest.startswith("True")]
    assert len(uses) >= 8
    assert all(rest == "True ['dagster']" for nodeid, rest in rows if nodeid in uses)
    assert all("dagster" not in rest for nodeid, rest in rows if nodeid not in uses)


GROUPED = """
import os
import pytest
from pipeline_project_tests.conftest import pytest_collection_modifyitems  # noqa: F401 - the hook under test


@pytest.fixture
def stack_dagster():
    return os.environ["PYTEST_XDIST_WORKER"]


@pytest.fixture
def fault_stack():
    return os.environ["PYTEST_XDIST_WORKER"]
"""


def test_a_groups_tests_run_on_one_pytest_xdist_worker(tmp_path):
    """The groups reach pytest-xdist: its worker hook reads them into each node id, so ours must run first."""
    (tmp_path / "conftest.py").write_text(GROUPED)
    tests = [f"def test_d{i}(stack_dagster):\n    print('RAN', 'dagster', stack_dagster)\n" for i in range(4)]
    tests += [f"def test_f{i}(fault_stack):\n    print('RAN', 'fault', fault_stack)\n" for i in range(4)]
    (tmp_path / "test_grouped.py").write_text("\n\n".join(tests))
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider", "-rP", "-q",
         "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:]
    ran = [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("RAN ")]
    assert len(ran) == 8
    for group in ("dagster", "fault"):
        assert len({worker for g, worker in ran if g == group}) == 1, ran
