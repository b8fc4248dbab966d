"""Language-aware word splitting and text normalization shared by the steps.

`split_words` for non-CJK languages follows spaCy's English tokenizer rules (the one DataTrove 0.10.1
assigns to English): whitespace chunks, prefix/suffix punctuation and "n't"/"'s" split off, a few infixes
(hyphen between letters, "/" and ":" before a letter, ...), URLs and abbreviations kept whole. It is an approximation; bench/cleaning_vs_datatrove.py measures how
often the filter decisions still agree. Chinese and Japanese go through jieba, as DataTrove's spaCy "zh" does.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import regex
import rjieba

CJK_LANGS = frozenset({"zh", "ja"})

# spaCy splits a whitespace chunk only at its edges (prefix/suffix punctuation, contractions) and at a few
# infixes; punctuation inside a chunk ("fs::File", "COVID-19", "好，可") stays attached.
_PUNCT = r"""\.\.+|…+|[,:;!?¿¡()\[\]{}<>_#*&。？！，、；：～·"“”'‘’`«»„（）《》「」『』【】〈〉]"""
_PREFIX = re.compile(r"(?:" + _PUNCT + r"|[§%=—–+$£€¥])")
_SUFFIX = regex.compile(
    r"(?:[nN]['’][tT]|['’](?:[sSmMdD]|ll|LL|re|RE|ve|VE)|" + _PUNCT + r"|[%—–]|(?<=[0-9])\+"
    r"|(?<=[0-9\p{Ll}%²\-+)\]}\"'”’`])\.|(?<=\p{Lu}\p{Lu})\.)$"
)
_INFIX = re.compile(
    r"\.\.+|…"
    r"|(?<=[^\W\d_])(?:--|-|–|—|~)(?=[^\W\d_])|(?<=\d)(?:-|–|—)(?=[^\W\d_])"
    r"|(?<=[^\W_])[:<>=/](?=[^\W\d_])|(?<=[^\W\d_]),(?=[^\W\d_])|(?<=[a-z])\.(?=[A-Z])|(?<=\d)[+\-*^](?=\d)"
)
_EXCEPTIONS = frozenset(
    [
        "Mr.",
        "Mrs.",
        "Ms.",
        "Dr.",
        "St.",
        "Jr.",
        "Sr.",
        "Mt.",
        "vs.",
        "etc.",
        "e.g.",
        "i.e.",
        "Inc.",
        "Ltd.",
        "Co.",
        "Corp.",
        "No.",
        "Prof.",
        "Gen.",
        "Gov.",
        "Sen.",
        "Rep.",
        "Jan.",
        "Feb.",
        "Mar.",
        "Apr.",
        "Jun.",
        "Jul.",
        "Aug.",
        "Sep.",
        "Sept.",
        "Oct.",
        "Nov.",
        "Dec.",
        "a.m.",
        "p.m.",
        "U.S.",
        "U.K.",
    ]
)


_LONGEST_EXCEPTION = max(map(len, _EXCEPTIONS))


def _suffix(chunk: str, start: int, end: int):
    """`_SUFFIX.search(chunk[start:end])`, as (start, end, text) in `chunk`, looking at the end only.

    Every suffix is at most 3 characters, or a run of "." or of "…" (`_PUNCT`), so no match starts before the
    last 3 characters or that run; the 2 characters before that are the lookbehinds' context. Searching there
    keeps a chunk of a million punctuation marks linear (each search of the whole chunk made it quadratic)."""
    w = end - 3
    last = chunk[end - 1]
    if last in ".…":  # a run of two or more is a suffix: it is cut off now, so each run is walked once
        w = min(w, end - 1)
        while w > start and chunk[w - 1] == last:
            w -= 1
    base = max(start, w - 2)
    m = _SUFFIX.search(chunk[base:end])
    return None if m is None else (base + m.start(), base + m.end(), m.group(0))


def _split_chunk(chunk: str, out: list[str]) -> None:
    if chunk.isalnum() or chunk in _EXCEPTIONS:
        if chunk.lower() == "cannot":
            out.extend((chunk[:3], chunk[3:]))
        else:
            out.append(chunk)
        return
    start, end, suffixes = _strip_affixes(chunk, out)
    _split_infixes(chunk[start:end], out)
    out.extend(reversed(suffixes))


def _strip_affixes(chunk: str, out: list[str]) -> tuple[int, int, list[str]]:
    """Append `chunk`'s prefixes to `out`; return the bounds of what is left and the suffixes cut off (last
    first). Stops at an exception or a URL, which are not split."""
    suffixes: list[str] = []
    start, end = 0, len(chunk)
    url = chunk.find("://")  # the first "://" at or after `start` (a URL is not split)

    def exception() -> bool:
        return end - start <= _LONGEST_EXCEPTION and chunk[start:end] in _EXCEPTIONS

    def is_url() -> bool:
        nonlocal url
        if 0 <= url < start:
            url = chunk.find("://", start)
        return 0 <= url <= end - 3 or chunk.startswith("www.", start, end)

    while start < end and not exception():
        if is_url():
            break
        changed = False
        m = _PREFIX.match(chunk, start, end)
        if m:
            out.append(m.group(0))
            start = m.end()
            changed = True
        if start < end and not exception():
            found = _suffix(chunk, start, end)
            if found and found[0] > start:
                suffixes.append(found[2])
                end = found[0]
                changed = True
            elif found:  # the whole rest is one punctuation token
                out.append(chunk[start:end])
                start = end
        if not changed:
            break
    return start, end, suffixes


def _split_infixes(chunk: str, out: list[str]) -> None:
    """Append `chunk` to `out`, split at its infixes unless it is an exception or a URL."""
    if not chunk:
        return
    if chunk in _EXCEPTIONS or "://" in chunk or chunk.startswith("www."):
        out.append(chunk)
        return
    pos = 0
    for m in _INFIX.finditer(chunk):
        if m.start() > pos:
            out.append(chunk[pos : m.start()])
        out.append(m.group(0))
        pos = m.end()
    if pos < len(chunk):
        out.append(chunk[pos:])


# a token is a "word" when at least one of its characters is not punctuation, symbol or control
_NON_SYMBOL = regex.compile(r"[^\p{P}\p{S}\p{Cc}]")
_SYMBOLS = regex.compile(r"[\p{P}\p{S}\p{Cc}]+")
_NUMBERS = regex.compile(r"\p{Nd}+(?:[.,،٫⎖⎗⎘]\p{Nd}+)?")
_WHITESPACE = regex.compile(r"\s+")
_SENT_END = regex.compile(r"\p{Sentence_Terminal}")
# every Sentence_Terminal code point lies in planes 0-1 (a test checks all of Unicode); one findall over them
# costs ~10 ms at import, a match per code point of all 17 planes cost ~250 ms in every process
_TERMINAL_PLANES = 0x20000
TERMINAL_PUNCTUATION = tuple(sorted(set(_SENT_END.findall("".join(map(chr, range(_TERMINAL_PLANES)))))))


@lru_cache(maxsize=1)
def _jieba():
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba


# Whitespace chunks follow Zipf's law: most of a document's punctuated chunks ("word,", "(see", "it's") were
# split before, in this process. Their tokens are kept here (bounded: cleared when full), so such a chunk is
# split by the rules once, then looked up.
_CHUNK_TOKENS: dict[str, tuple[str, ...]] = {}
_CJK_BLOCK_TOKENS: dict[str, tuple[str, ...]] = {}  # jieba's words of a block (its own cache: other rules)
_CHUNK_TOKENS_MAX = 1 << 17


def _remember(cache: dict[str, tuple[str, ...]], chunk: str, tokens: tuple[str, ...]) -> tuple[str, ...]:
    if len(cache) >= _CHUNK_TOKENS_MAX:
        cache.clear()
    cache[chunk] = tokens
    return tokens


def _chunk_tokens(chunk: str) -> tuple[str, ...]:
    out: list[str] = []
    _split_chunk(chunk, out)
    return _remember(_CHUNK_TOKENS, chunk, tuple(out))


# A block of Han characters only is cut as jieba cuts it, faster: jieba-rs (`rjieba`, the same dictionary)
# finds the dictionary route, and jieba's own HMM joins the runs of single characters that are not a word, as
# `jieba.Tokenizer.__cut_DAG` does. jieba-rs's own HMM differs on rare characters ("常在於險遠"), and it groups
# Latin letters and digits its own way, so those blocks go to jieba (a test compares every block of the corpus).
_PURE_HAN = re.compile("[\u4e00-\u9fd5]+")


def _cut_block(block: str) -> tuple[str, ...]:
    jieba = _jieba()
    if not _PURE_HAN.fullmatch(block):
        return tuple(jieba.lcut(block))
    out: list[str] = []
    singles = ""  # consecutive one-character words of the route

    def flush() -> None:
        if len(singles) > 1 and not jieba.dt.FREQ.get(singles):
            out.extend(_hmm_words(singles))
        else:
            out.extend(singles)

    for word in rjieba.cut(block, hmm=False):
        if len(word) == 1:
            singles += word
            continue
        if singles:
            flush()
            singles = ""
        out.append(word)
    if singles:
        flush()
    return tuple(out)


@lru_cache(maxsize=1)
def _hmm_tables() -> tuple:
    from jieba.finalseg import MIN_FLOAT, emit_P, start_P, trans_P

    t = {(a, b): trans_P[a].get(b, MIN_FLOAT) for a in "BMES" for b in "BMES"}
    return MIN_FLOAT, start_P, t, tuple(emit_P[y].get for y in "BMES")


def _hmm_words(han: str) -> list[str]:
    """`jieba.finalseg.cut(han)` for a string of Han characters only, with the same arithmetic and the same
    tie-breaks (its `max` over (probability, state) tuples), with back-pointers instead of copied paths."""
    low, start, t, (eb, em, ee, es) = _hmm_tables()
    c = han[0]
    b, m, e, s = start["B"] + eb(c, low), start["M"] + em(c, low), start["E"] + ee(c, low), start["S"] + es(c, low)
    back: list[tuple[str, str, str, str]] = []  # per position: the previous state of B, M, E, S
    for c in han[1:]:
        from_e, from_s = e + t["E", "B"] + eb(c, low), s + t["S", "B"] + eb(c, low)
        nb, pb = (from_e, "E") if from_e > from_s else (from_s, "S")
        from_m, from_b = m + t["M", "M"] + em(c, low), b + t["B", "M"] + em(c, low)
        nm, pm = (from_m, "M") if from_m >= from_b else (from_b, "B")
        from_b2, from_m2 = b + t["B", "E"] + ee(c, low), m + t["M", "E"] + ee(c, low)
        ne, pe = (from_m2, "M") if from_m2 >= from_b2 else (from_b2, "B")
        from_s2, from_e2 = s + t["S", "S"] + es(c, low), e + t["E", "S"] + es(c, low)
        ns, ps = (from_s2, "S") if from_s2 >= from_e2 else (from_e2, "E")
        back.append((pb, pm, pe, ps))
        b, m, e, s = nb, nm, ne, ns
    state = "S" if s >= e else "E"
    states = [state]
    for step in reversed(back):
        state = step["BMES".index(state)]
        states.append(state)
    states.reverse()
    words: list[str] = []
    begin = nexti = 0
    for i, pos in enumerate(states):
        if pos == "B":
            begin = i
        elif pos == "E":
            words.append(han[begin : i + 1])
            nexti = i + 1
        elif pos == "S":
            words.append(han[i])
            nexti = i + 1
    if nexti < len(han):
        words.append(han[nexti:])
    return words


def _cjk_tokens(text: str) -> list[str]:
    """`jieba.lcut(text)`, from a cache of its blocks: jieba cuts each run of `re_han_default` (and each piece
    between two runs) on its own, so the words of the text are the words of its blocks, in order."""
    out: list[str] = []
    known = _CJK_BLOCK_TOKENS.get
    for block in _jieba().re_han_default.split(text):
        if block:
            tokens = known(block)
            if tokens is None:
                tokens = _remember(_CJK_BLOCK_TOKENS, block, _cut_block(block))
            out.extend(tokens)
    return out


def split_words(text: str, lang: str | None = None) -> list[str]:
    if lang in CJK_LANGS:
        return [t for t in (w.strip() for w in _cjk_tokens(text)) if t]
    out: list[str] = []
    known = _CHUNK_TOKENS.get
    for chunk in text.split():
        if chunk.isalnum() and len(chunk) != 6:  # a plain word (6: "cannot" is split); the rest are looked up
            out.append(chunk)
        else:
            out.extend(known(chunk) or _chunk_tokens(chunk))
    return out


def is_word(token: str) -> bool:
    return token.isalnum() or _NON_SYMBOL.search(token) is not None  # letters and digits are never P, S or Cc


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
