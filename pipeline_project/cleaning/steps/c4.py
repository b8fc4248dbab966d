"""C4 line and document rules (Raffel et al. 2020) as DataTrove's C4QualityFilter applies them."""

from __future__ import annotations

import re

from pipeline_project.cleaning.config import C4Config
from pipeline_project.cleaning.steps.base import DocFilter, doc_lang
from pipeline_project.cleaning.steps.text import CJK_LANGS, TERMINAL_PUNCTUATION, is_word, split_words

_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_END_PUNCT = (".", "?", "!", '"', "'")
_TERMINALS = frozenset(TERMINAL_PUNCTUATION)


def count_sentences(line: str, lang: str) -> int:
    """Sentences as spaCy's sentencizer counts them: a new one starts after a run of terminal punctuation."""
    toks = split_words(line, lang)
    if not toks:
        return 0
    flags = [t in _TERMINALS for t in toks]
    return 1 + sum(1 for a, b in zip(flags, flags[1:]) if a and not b)


class C4Quality(DocFilter):
    name = "c4"

    def __init__(self, cfg: C4Config):
        self.cfg = cfg

    def check(self, doc):
        cfg, lang = self.cfg, doc_lang(doc)
        cjk = cfg.cjk_word_split and lang in CJK_LANGS
        num_sentences = 0
        kept = []
        for line in doc.text.splitlines():
            line = line.strip()
            words = line.split()
            if cfg.max_word_length != -1 and any(len(w) > cfg.max_word_length for w in words):
                continue
            if cfg.remove_citations:
                line = _CITATION.sub("", line)
            if cfg.filter_no_terminal_punct and (not line.endswith(_END_PUNCT) or line.endswith("...")):
                continue
            n_words = sum(1 for w in split_words(line, lang) if is_word(w)) if cjk else len(words)
            if n_words < cfg.min_words_per_line:
                continue
            lower = line.lower()
            if cfg.filter_lorem_ipsum and "lorem ipsum" in lower:
                return "lorem_ipsum"
            if cfg.filter_javascript and "javascript" in lower:
                continue
            if cfg.filter_curly_bracket and "{" in line:
                return "curly_bracket"
            if cfg.filter_policy and any(p in lower for p in cfg.policy_substrings):
                continue
            if cfg.min_num_sentences != -1:
                num_sentences += count_sentences(line, lang) if cfg.split_paragraph else 1
            kept.append(line)
        if num_sentences < cfg.min_num_sentences:
            return "too_few_sentences"
        text = "\n".join(kept).strip()
        if text != doc.text:
            doc.text = text
        return None
