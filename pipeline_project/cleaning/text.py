"""Language-aware word splitting and text normalization shared by the steps.

`split_words` for non-CJK languages is one regex pass that follows spaCy's English tokenizer (the one
DataTrove 0.10.1 assigns to English): punctuation split off, "n't"/"'s" contractions split, hyphens and
URLs/e-mails handled, whitespace dropped. It is an approximation; bench/cleaning_vs_datatrove.py measures how
often the filter decisions still agree. Chinese and Japanese go through jieba, as DataTrove's spaCy "zh" does.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import lru_cache

import regex

CJK_LANGS = frozenset({"zh", "ja"})

_CORE = r"""
  | [^\W\d_](?:\.[^\W\d_])+\.?                    # U.S. e.g.
  | \d+(?:[.,:/]\d+)+                               # 1,000.5 12:30 1/2
  | [^\W\d_]\w*(?=[nN]['’][tT]\b)                  # do|n't
  | [nN]['’][tT]\b
  | ['’](?:[sSmMdD]|ll|LL|re|RE|ve|VE)\b
  | \w+
  | \.{2,}|…|-{2,}
  | \S
"""
_WEB = r"""
    (?:https?://|www\.)[^\s<>"]*[^\s<>".,;:!?)\]'’”]  # URL
  | [\w.+-]+@[\w-]+(?:\.[\w-]+)+                     # e-mail
"""
# stdlib re is faster than `regex` here; the URL/e-mail branches cost a scan per word, so only when needed
_TOKEN = re.compile(_WEB + _CORE, re.VERBOSE)
_TOKEN_PLAIN = re.compile(r"(?!x)x" + _CORE, re.VERBOSE)
# a token is a "word" when at least one of its characters is not punctuation, symbol or control
_NON_SYMBOL = regex.compile(r"[^\p{P}\p{S}\p{Cc}]")
_SYMBOLS = regex.compile(r"[\p{P}\p{S}\p{Cc}]+")
_NUMBERS = regex.compile(r"\p{Nd}+(?:[.,،٫⎖⎗⎘]\p{Nd}+)?")
_WHITESPACE = regex.compile(r"\s+")
_SENT_END = regex.compile(r"\p{Sentence_Terminal}")
TERMINAL_PUNCTUATION = tuple(sorted({chr(c) for c in range(sys.maxunicode + 1) if _SENT_END.match(chr(c))}))


@lru_cache(maxsize=1)
def _jieba():
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


def split_words(text: str, lang: str | None = None) -> list[str]:
    if lang in CJK_LANGS:
        return [t for t in (w.strip() for w in _jieba().lcut(text)) if t]
    web = "@" in text or "://" in text or "www." in text
    return (_TOKEN if web else _TOKEN_PLAIN).findall(text)


def is_word(token: str) -> bool:
    return _NON_SYMBOL.search(token) is not None


def simplify(text: str) -> str:
    """MinHash normalization: lowercase, numbers -> 0, punctuation -> space, collapsed whitespace, no diacritics."""
    text = _NUMBERS.sub("0", text.lower())
    text = _WHITESPACE.sub(" ", _SYMBOLS.sub(" ", text)).strip()
    if not text.isascii():
        text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
    return text


def normalize_for_exact(text: str) -> str:
    """Exact-dedup key: case and whitespace differences do not make a new document."""
    return _WHITESPACE.sub(" ", text.lower()).strip()
