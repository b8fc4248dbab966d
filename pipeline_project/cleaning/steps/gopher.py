"""Gopher quality and repetition rules (Rae et al. 2021, table A1), thresholds as in DataTrove 0.10.1."""

from __future__ import annotations

import re

import numpy as np

from pipeline_project.cleaning.config import GopherQualityConfig, GopherRepetitionConfig
from pipeline_project.cleaning.steps.base import DocFilter, doc_lang, doc_words
from pipeline_project.cleaning.steps.signals import Lazy, Live
from pipeline_project.cleaning.steps.text import is_word

_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")
_MIX = np.uint64(0x9E3779B97F4A7C15)


GOPHER_QUALITY_SIGNALS = (
    *("content_words", "avg_word_length", "hash_ratio", "ellipsis_ratio", "bullet_lines_ratio"),
    *("end_ellipsis_lines_ratio", "alpha_words_ratio", "stop_words"),
)


class GopherQuality(DocFilter):
    name = "gopher_quality"

    def __init__(self, cfg: GopherQualityConfig):
        self.cfg = cfg
        self.stop_words = {lang: frozenset(words) for lang, words in cfg.stop_words.items()}

    def _limit(self, lang: str, field: str):
        overrides = self.cfg.lang_overrides.get(lang, {})
        return overrides[field] if field in overrides else getattr(self.cfg, field)

    def signal_names(self) -> tuple[str, ...]:
        return GOPHER_QUALITY_SIGNALS

    def check(self, doc):
        return self.decide(doc_lang(doc), Live(doc, self.name), doc)

    def decide(self, lang: str, get, doc=None) -> str | None:
        """The rules, over signals `get` computes (cleaning) or reads back (retune; `steps/signals.py`)."""
        lim = lambda f: self._limit(lang, f)  # noqa: E731
        words = Lazy(lambda: doc_words(doc))
        content = Lazy(lambda: [w for w in words() if is_word(w)])
        lines = Lazy(lambda: doc.text.splitlines())
        n = get("content_words", lambda: len(content()))
        if (m := lim("min_doc_words")) and n < m:
            return "gopher_short_doc"
        if (m := lim("max_doc_words")) and n > m:
            return "gopher_long_doc"
        if n == 0:
            return "gopher_short_doc"
        avg = get("avg_word_length", lambda: sum(map(len, content())) / n)
        if (m := lim("min_avg_word_length")) and avg < m:
            return "gopher_below_avg_threshold"
        if (m := lim("max_avg_word_length")) and avg > m:
            return "gopher_above_avg_threshold"
        m = lim("max_symbol_word_ratio")
        if get("hash_ratio", lambda: doc.text.count("#") / len(words())) > m if m else False:
            return "gopher_too_many_hashes"
        ellipsis = lambda: (doc.text.count("...") + doc.text.count("…")) / len(words())  # noqa: E731
        if get("ellipsis_ratio", ellipsis) > m if m else False:
            return "gopher_too_many_ellipsis"
        bullets = lambda: sum(1 for s in lines() if s.lstrip().startswith(("•", "-"))) / len(lines())  # noqa: E731
        if (m := lim("max_bullet_lines_ratio")) and get("bullet_lines_ratio", bullets) > m:
            return "gopher_too_many_bullets"
        ends = lambda: sum(1 for s in lines() if s.rstrip().endswith(("...", "…"))) / len(lines())  # noqa: E731
        if (m := lim("max_ellipsis_lines_ratio")) and get("end_ellipsis_lines_ratio", ends) > m:
            return "gopher_too_many_end_ellipsis"
        alpha = lambda: sum(1 for w in words() if w.isalpha() or any(c.isalpha() for c in w)) / len(words())  # noqa: E731
        if (m := lim("max_non_alpha_words_ratio")) and get("alpha_words_ratio", alpha) < m:
            return "gopher_below_alpha_threshold"
        stop = self.stop_words.get(lang)
        stops = lambda: len(stop.intersection(words()))  # noqa: E731
        if (m := lim("min_stop_words")) and stop is not None and get("stop_words", stops) < m:
            return "gopher_enough_stop_words"
        return None


def _groups(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For equal keys: first position of each group, group sizes, and sorted positions in groups of 2+."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], sk[1:] != sk[:-1])))
    counts = np.diff(np.append(starts, sk.size))
    size_at = np.repeat(counts, counts)
    return order[starts], counts, np.sort(order[size_at >= 2])


def dup_count_chars(items: list[str]) -> tuple[int, int]:
    """(items that repeat an earlier one, their characters): Gopher's and FineWeb's duplicate fractions."""
    seen: set[str] = set()
    dups = chars = 0
    for item in items:
        if item in seen:
            dups += 1
            chars += len(item)
        else:
            seen.add(item)
    return dups, chars


class GopherRepetition(DocFilter):
    """Same rules as DataTrove's GopherRepetitionFilter; n-grams are compared as 64-bit rolling hashes of
    word hashes instead of joined strings, which is where that filter spends its time."""

    name = "gopher_repetition"

    def __init__(self, cfg: GopherRepetitionConfig):
        self.cfg = cfg

    def signal_names(self) -> tuple[str, ...]:
        fixed = ("chars", "dup_para_frac", "dup_para_char_frac", "dup_line_frac", "dup_line_char_frac", "words")
        top = tuple(f"top_{n}_gram" for n, _ in self.cfg.top_n_grams)
        return fixed + top + tuple(f"duplicated_{n}_n_grams" for n, _ in self.cfg.dup_n_grams)

    def check(self, doc):
        return self.decide(doc_lang(doc), Live(doc, self.name), doc)

    def decide(self, lang: str, get, doc=None) -> str | None:
        """The rules, over signals `get` computes (cleaning) or reads back (retune; `steps/signals.py`)."""
        cfg = self.cfg
        chars = get("chars", lambda: len(doc.text))
        if not chars:
            return "empty"
        paras = Lazy(lambda: (*dup_count_chars(p := _PARAGRAPHS.split(doc.text.strip())), len(p)))
        if cfg.dup_para_frac and get("dup_para_frac", lambda: paras()[0] / paras()[2]) > cfg.dup_para_frac:
            return "dup_para_frac"
        if cfg.dup_para_char_frac and get("dup_para_char_frac", lambda: paras()[1] / chars) > cfg.dup_para_char_frac:
            return "dup_para_char_frac"
        lines = Lazy(lambda: (*dup_count_chars(p := _LINES.split(doc.text)), len(p)))
        if cfg.dup_line_frac and get("dup_line_frac", lambda: lines()[0] / lines()[2]) > cfg.dup_line_frac:
            return "dup_line_frac"
        if cfg.dup_line_char_frac and get("dup_line_char_frac", lambda: lines()[1] / chars) > cfg.dup_line_char_frac:
            return "dup_line_char_frac"
        n_words = get("words", lambda: len(doc_words(doc)))
        if not n_words:
            return None
        grams = Lazy(lambda: self._ngram_keys(doc_words(doc)))
        for n, frac in cfg.top_n_grams:
            if n_words < n:
                continue
            if get(f"top_{n}_gram", lambda n=n: self._top_ratio(*grams(), n, chars)) > frac:
                return f"top_{n}_gram"
        unrepeated = None  # the smallest n with no n-gram occurring twice: no longer n-gram can occur twice
        for n, frac in cfg.dup_n_grams:
            if n_words < n or (unrepeated is not None and n > unrepeated):
                continue
            ratio = get(f"duplicated_{n}_n_grams", lambda n=n: self._dup_ratio(*grams(), n, chars))
            if ratio == 0:  # no n-gram occurs twice (a repeated one has at least one character)
                unrepeated = n if unrepeated is None else min(n, unrepeated)
            elif ratio > frac:
                return f"duplicated_{n}_n_grams"
        return None

    def _ngram_keys(self, words: list[str]) -> tuple[dict[int, np.ndarray], np.ndarray]:
        hashes = np.fromiter(map(hash, words), dtype=np.int64, count=len(words)).view(np.uint64)
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        cum = np.concatenate(([0], np.cumsum(lengths)))
        keys_by_n = {1: hashes}
        keys = hashes
        for n in range(2, max(self._all_n()) + 1):
            if len(words) < n:
                break
            keys = keys[:-1] * _MIX + hashes[n - 1 :]
            keys_by_n[n] = keys
        return keys_by_n, cum

    @staticmethod
    def _top_ratio(keys_by_n: dict[int, np.ndarray], cum: np.ndarray, n: int, chars: int) -> float:
        first, counts, _ = _groups(keys_by_n[n])
        top = counts.max()
        pos = first[counts == top].min()  # Counter.most_common keeps first-seen order on ties
        ngram_len = int(cum[pos + n] - cum[pos]) + n - 1  # " ".join length
        return ngram_len * int(top) / chars

    def _dup_ratio(self, keys_by_n: dict[int, np.ndarray], cum: np.ndarray, n: int, chars: int) -> float:
        repeated = self._greedy_repeated_chars(keys_by_n[n], cum, n)
        return 0.0 if repeated is None else repeated / chars

    def _all_n(self):
        return [n for n, _ in self.cfg.top_n_grams] + [n for n, _ in self.cfg.dup_n_grams] + [1]

    @staticmethod
    def _greedy_repeated_chars(keys: np.ndarray, cum: np.ndarray, n: int) -> int | None:
        """Scan left to right; a repeated n-gram counts its characters and skips n words ("".join length).
        None when no n-gram occurs twice.

        Positions whose n-gram occurs once in the whole document can never be "seen", so the scan only
        visits positions of n-grams that occur at least twice."""
        _, _, repeated_pos = _groups(keys)
        if repeated_pos.size == 0:
            return None
        seen: set[int] = set()
        repeated, idx = 0, 0
        key_list = keys[repeated_pos].tolist()
        cum_list = cum.tolist()
        for pos, key in zip(repeated_pos.tolist(), key_list):
            if pos < idx:
                continue  # inside an n-gram already counted as repeated
            if key in seen:
                repeated += cum_list[pos + n] - cum_list[pos]
                idx = pos + n
            else:
                seen.add(key)
                idx = pos + 1
        return repeated
