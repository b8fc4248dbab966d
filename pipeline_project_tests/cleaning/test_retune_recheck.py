"""Retune after a decontamination change (issue 31 items 2 and 3), pure logic: the documents that reached the
`decontaminate` step are re-checked from their cleaned text, the others keep their decision."""

from __future__ import annotations

import json

import pytest

from pipeline_project.cleaning import CleaningConfig
from pipeline_project.cleaning.retune.decide import Retuner

BENCH = (
    "Write a function that returns the number of vowels in the given string, counting upper and lower case letters "
    "alike and ignoring every other character of the input."
)
FILLER = "The quiet garden watched the distant river and the narrow bridge that carried it with letters."
PLAIN = {  # en_web only, no retunable filter: the rows need no signals
    "language": {"enabled": False},
    "gopher_repetition": {"enabled": False},
    "gopher_quality": {"enabled": False},
    "fineweb": {"enabled": False},
    "profiles": {"enabled": False},
}


def _bench(tmp_path, name: str, text: str) -> dict:
    path = tmp_path / f"{name}.jsonl"
    path.write_text(json.dumps({"task": text}) + "\n")
    return {"name": name, "path": str(path)}


def _config(*benchmarks: dict) -> CleaningConfig:
    decontam = {"enabled": bool(benchmarks), "benchmarks": list(benchmarks)}
    return CleaningConfig.model_validate({**PLAIN, "decontamination": decontam})


def _row(doc_id: str, decision: str = "kept", step: str = "", reason: str = "") -> dict:
    dup = reason.partition("_duplicate_of:")[2] or None
    return {"doc_id": doc_id, "source": f"raw/{doc_id}.txt", "record": "", "domain": "en_web", "lang": "en",
            "decision": decision, "step": step or None, "reason": reason or None, "dup_of": dup}  # fmt: skip


def _rows_and_texts():
    words = BENCH.split()
    texts = {
        "verbatim": BENCH,
        "spaced": "\n\t".join("  ".join(words[i : i + 3]) for i in range(0, len(words), 3)).upper(),
        "embedded": f"{FILLER}\n\n{BENCH}\n\n{FILLER}",
        "near": f"{FILLER} {' '.join(words[2:14])} {FILLER}",  # 12 words of it: no 13-gram
        "clean": FILLER,
        "copy_of_verbatim": BENCH,  # an exact duplicate of a planted document: contaminated as well
        "copy_of_clean": FILLER,
        "late": f"{BENCH} {FILLER}",  # a late drop at index commit also reached the step
    }
    rows = [_row(d) for d in ("verbatim", "spaced", "embedded", "near", "clean")]
    rows += [
        _row("copy_of_verbatim", "dropped", "exact_dedup", "exact_duplicate_of:b/verbatim"),
        _row("copy_of_clean", "dropped", "exact_dedup", "exact_duplicate_of:b/clean"),
        _row("late", "dropped", "index_commit", "near_duplicate_of:other/x"),
        _row("empty", "dropped", "non_empty", "empty"),
        _row("c4_line", "dropped", "c4", "c4:lorem_ipsum"),
        _row("bad", "quarantined", "read", "binary content"),
    ]
    return rows, texts


def _run(retuner: Retuner, rows, texts, asked: list | None = None):
    def text_of(ids):
        (asked if asked is not None else []).extend(ids)
        return {i: texts[i] for i in ids if i in texts}

    result = retuner.run("b", rows, text_of)
    return result, {r["doc_id"]: (o.decision, o.step, o.reason) for r, o in zip(rows, result.outcomes)}


@pytest.mark.parametrize("before", ["off", "other benchmark"])
def test_a_new_benchmark_drops_exactly_the_contaminated_documents_that_reached_the_step(tmp_path, before):
    other = _bench(tmp_path, "other", "A benchmark about something else entirely: " + " ".join(["zebra"] * 20))
    old = _config() if before == "off" else _config(other)
    new = _config(*([] if before == "off" else [other]), _bench(tmp_path, "vowels", BENCH))
    rows, texts = _rows_and_texts()
    asked: list[str] = []
    result, decided = _run(Retuner(old, new), rows, texts, asked)

    contaminated = ("dropped", "decontaminate", "decontaminated:vowels")
    for doc in ("verbatim", "spaced", "embedded", "copy_of_verbatim", "late"):
        assert decided[doc] == contaminated, doc
    assert decided["near"] == decided["clean"] == ("kept", "", "")
    assert decided["copy_of_clean"] == ("dropped", "exact_dedup", "exact_duplicate_of:b/clean")
    assert decided["empty"] == ("dropped", "non_empty", "empty")  # dropped before the step: never re-checked
    assert decided["c4_line"] == ("dropped", "c4", "c4:lorem_ipsum")
    assert decided["bad"][0] == "quarantined"
    assert sorted(asked) == sorted(texts)  # the text of exactly the documents that reached the step
    assert result.undecidable() == 0
    affected = result.affected()
    assert [a["doc_id"] for a in affected] == ["verbatim", "spaced", "embedded"]
    assert affected[0] == {"batch": "b", "doc_id": "verbatim", "source": "raw/verbatim.txt", "record": "",
                           "domain": "en_web", "step": "decontaminate", "reason": "decontaminated:vowels",
                           "benchmark": "vowels"}  # fmt: skip
    assert any("decontaminate" in n and "re-checked" in n for n in result.notes)


def test_an_unchanged_decontamination_reads_no_text_and_a_missing_text_is_undecidable(tmp_path):
    config = _config(_bench(tmp_path, "vowels", BENCH))
    rows, texts = _rows_and_texts()
    asked: list[str] = []
    result, decided = _run(Retuner(config, config, config.config_hash()), rows, texts, asked)
    assert asked == [] and not result.changes() and result.undecidable() == 0

    # the benchmark file changed in place since the batch was cleaned: its hash in the manifest tells
    cleaned_with = config.config_hash()
    (tmp_path / "vowels.jsonl").write_text(json.dumps({"task": FILLER + " " + FILLER}) + "\n")
    result, decided = _run(Retuner(config, config, cleaned_with), rows, {**texts, "verbatim": None})
    assert decided["clean"] == ("dropped", "decontaminate", "decontaminated:vowels")
    assert decided["verbatim"][0] == "undecidable" and "text" in result.outcomes[0].reason


def test_documents_dropped_by_the_old_step_are_re_checked_and_its_removal_is_undecidable(tmp_path):
    vowels, other = _bench(tmp_path, "vowels", BENCH), _bench(tmp_path, "other", FILLER + " " + FILLER)
    rows = [_row("a", "dropped", "decontaminate", "decontaminated:vowels"), _row("k")]
    texts = {"a": BENCH, "k": FILLER}
    _, decided = _run(Retuner(_config(vowels), _config(other, vowels)), rows, texts)
    assert decided["a"] == ("dropped", "decontaminate", "decontaminated:vowels")
    assert decided["k"] == ("dropped", "decontaminate", "decontaminated:other")
    _, decided = _run(Retuner(_config(vowels), _config(other)), rows, texts)
    assert decided["a"][0] == "undecidable" and "never reached" in str(decided["a"])  # dedup needs the index
    result, decided = _run(Retuner(_config(vowels), _config()), rows, texts)
    assert decided["a"][0] == "undecidable" and "off now" in result.outcomes[0].reason
    assert decided["k"] == ("kept", "", "")
