"""FineWeb's three custom filters (line punctuation, short lines, duplicated line characters) plus its list ratio."""

from __future__ import annotations

import math

from pipeline_project.cleaning.config import FineWebConfig
from pipeline_project.cleaning.steps.base import DocFilter, doc_lang, doc_words
from pipeline_project.cleaning.steps.gopher import dup_count_chars
from pipeline_project.cleaning.steps.signals import Lazy, Live
from pipeline_project.cleaning.steps.text import TERMINAL_PUNCTUATION


class FineWebQuality(DocFilter):
    name = "fineweb"

    def __init__(self, cfg: FineWebConfig):
        self.cfg = cfg

    def signal_names(self) -> tuple[str, ...]:
        return ("lines", "line_punct_ratio", "short_line_ratio", "char_dup_ratio", "list_ratio")

    def check(self, doc):
        return self.decide(doc_lang(doc), Live(doc, self.name), doc)

    def decide(self, lang: str, get, doc=None) -> str | None:
        """The rules, over signals `get` computes (cleaning) or reads back (retune; `steps/signals.py`)."""
        cfg = self.cfg
        lines = Lazy(lambda: [line for line in doc.text.split("\n") if line.strip() != ""])
        n_lines = get("lines", lambda: len(lines()))
        if not n_lines:
            return "empty"
        ratio = get("line_punct_ratio", lambda: sum(1 for x in lines() if x.endswith(TERMINAL_PUNCTUATION)) / n_lines)
        if ratio < cfg.line_punct_thr and not (ratio == 0 and cfg.line_punct_exclude_zero):
            return "line_punct_ratio"
        short = cfg.short_line_length_by_lang.get(lang, cfg.short_line_length)
        if get("short_line_ratio", lambda: sum(1 for x in lines() if len(x) <= short) / n_lines) > cfg.short_line_thr:
            return "short_line_ratio"
        text = Lazy(lambda: doc.text)
        dup = lambda: dup_count_chars(lines())[1] / max(len(text()) - text().count("\n"), 1)  # noqa: E731
        if get("char_dup_ratio", dup) > cfg.char_duplicates_ratio:
            return "char_dup_ratio"
        words = Lazy(lambda: doc_words(doc))
        new_lines = lambda: text().count("\n") / len(words()) if words() else math.inf  # noqa: E731
        if get("list_ratio", new_lines) > cfg.new_line_ratio:
            return "list_ratio"
        return None
