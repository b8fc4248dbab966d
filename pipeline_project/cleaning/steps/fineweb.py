"""FineWeb's three custom filters (line punctuation, short lines, duplicated line characters) plus its list ratio."""

from __future__ import annotations

from pipeline_project.cleaning.config import FineWebConfig
from pipeline_project.cleaning.steps.base import DocFilter, doc_lang, doc_words
from pipeline_project.cleaning.steps.gopher import _dup_count_chars
from pipeline_project.cleaning.text import TERMINAL_PUNCTUATION


class FineWebQuality(DocFilter):
    name = "fineweb"

    def __init__(self, cfg: FineWebConfig):
        self.cfg = cfg

    def check(self, doc):
        cfg, text = self.cfg, doc.text
        lines = [line for line in text.split("\n") if line.strip() != ""]
        if not lines:
            return "empty"
        ratio = sum(1 for line in lines if line.endswith(TERMINAL_PUNCTUATION)) / len(lines)
        if ratio < cfg.line_punct_thr and not (ratio == 0 and cfg.line_punct_exclude_zero):
            return "line_punct_ratio"
        short = cfg.short_line_length_by_lang.get(doc_lang(doc), cfg.short_line_length)
        ratio = sum(1 for line in lines if len(line) <= short) / len(lines)
        if ratio > cfg.short_line_thr:
            return "short_line_ratio"
        ratio = _dup_count_chars(lines)[1] / max(len(text) - text.count("\n"), 1)
        if ratio > cfg.char_duplicates_ratio:
            return "char_dup_ratio"
        words = doc_words(doc)
        if not words or text.count("\n") / len(words) > cfg.new_line_ratio:
            return "list_ratio"
        return None
