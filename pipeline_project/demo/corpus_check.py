"""Does the stack's running Dagster lay out code for FIM and decontaminate against benchmarks, as the demo shows?

The stack's Dagster gets the DeepSeek-style corpus settings through its environment (`StackConfig.
dagster_corpus_env`), and its code location reads them once, when it loads. A Dagster started before those
settings existed, or from a shell that turned them off, runs without them until it is restarted; the demo asks
the running code location for its resources' configured values (Dagster's GraphQL API) and says so up front.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass

RESOURCES_QUERY = (
    "{ workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError { ... on RepositoryLocation {"
    " repositories { allTopLevelResourceDetails { name configuredValues { key value type } } } } } } } } }"
)
RESTART = "pipeline-project stack down --services dagster && pipeline-project stack up --with-dagster"


@dataclass(frozen=True)
class CorpusSettings:
    fim: dict[str, tuple[float, str]]  # domain -> (rate, mode); {} = FIM off
    benchmarks: tuple[str, ...]  # () = decontamination off

    def describe(self) -> str:
        fim = ", ".join(f"{d} at {rate:g} ({mode})" for d, (rate, mode) in sorted(self.fim.items())) or "off"
        return f"FIM {fim}; decontamination {', '.join(self.benchmarks) or 'off'}"

    def missing(self) -> list[str]:
        """What the demo's DeepSeek-style corpus needs and these settings lack."""
        return [
            what
            for what, on in (("FIM for code", "code" in self.fim), ("decontamination", bool(self.benchmarks)))
            if not on
        ]


def corpus_settings(resources: dict[str, dict[str, str]]) -> CorpusSettings:
    """The corpus settings of a code location's resources, given as Dagster shows their configured values
    (resource name -> field -> JSON text); fields not shown take the resources' defaults."""
    from pipeline_project.defs.resources.cleaning import CleaningResource
    from pipeline_project.defs.resources.layout import PipelineLayout

    def values(name: str, keys: tuple[str, ...]) -> dict:
        return {k: json.loads(v) for k, v in resources.get(name, {}).items() if k in keys}

    layout = PipelineLayout(**values("layout", ("topic",)))
    policy = layout.topic_spec.fim
    cleaning = CleaningResource(**values("cleaning", ("config_path",))).config()
    decontamination = cleaning.decontamination
    return CorpusSettings(
        fim={d: (c.rate, c.mode) for d, c in policy.domains.items() if c.rate > 0},
        benchmarks=tuple(b.name for b in decontamination.benchmarks) if decontamination.enabled else (),
    )


def running_resources(dagster_url: str, timeout_s: float = 10.0) -> dict[str, dict[str, str]]:
    """Resource name -> field -> configured value (JSON text) of the webserver's code location; {} when it has
    none loaded. Values that come from environment variables or secrets are left out."""
    request = urllib.request.Request(
        dagster_url.rstrip("/") + "/graphql",
        data=json.dumps({"query": RESOURCES_QUERY}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as resp:
        return resources_of(json.loads(resp.read())["data"])


def resources_of(data: dict) -> dict[str, dict[str, str]]:
    """`running_resources` of the answer (`data`) to RESOURCES_QUERY."""
    out: dict[str, dict[str, str]] = {}
    for entry in (data.get("workspaceOrError") or {}).get("locationEntries") or []:
        for repo in (entry.get("locationOrLoadError") or {}).get("repositories") or []:
            for res in repo["allTopLevelResourceDetails"]:
                out[res["name"]] = {v["key"]: v["value"] for v in res["configuredValues"] if v["type"] == "VALUE"}
    return out


def check_running_dagster(dagster_url: str, wait_s: float = 120.0) -> tuple[CorpusSettings | None, str | None]:
    """(the running code location's corpus settings, a warning for the user or None when all is on). A code
    location that is still loading (a Dagster just started) is waited for, up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            resources = running_resources(dagster_url)
        except (OSError, ValueError, KeyError, TypeError) as err:
            return None, f"could not read the corpus settings of the Dagster at {dagster_url}: {err}"
        if resources:
            break
        if time.monotonic() > deadline:
            return None, f"the Dagster at {dagster_url} has no code location loaded; see its Deployment page"
        time.sleep(2.0)
    try:
        settings = corpus_settings(resources)
    except (OSError, ValueError) as err:  # a cleaning config file the code location names but this process can't read
        return None, f"could not read the corpus settings of the Dagster at {dagster_url}: {err}"
    missing = settings.missing()
    if not missing:
        return settings, None
    return settings, (
        f"the stack's Dagster runs without {' and '.join(missing)} ({settings.describe()}), so the summary will "
        "say 'off' for them. It reads its corpus settings when it starts: it was started before they existed, or "
        "from a shell that set PIPELINE_FIM_CODE_RATE=0 or a PIPELINE_CLEANING_CONFIG of its own. To apply them, "
        f"restart it (from a shell without those) when no one else is using it: `{RESTART}`"
    )
