"""Cleaning profiles: which chain each document goes through, and the chains.

`ProfileRouter.select` picks one profile per document, in this order, and records it as `meta["domain"]`:

    code    the source key has a code path segment (`code/`), a JSONL `lang` field names a programming
            language, or a JSONL `path` field ends in a program suffix. Checked first: code is not natural
            language. `meta["lang"]` becomes the file's language, from its suffix
    books   a path hint (`gutenberg`, `books/`) or a Project Gutenberg header, and at least `min_chars`; or a
            document of at least `long_form_min_chars` with no hint
    zh_web  the document is Chinese: the caller's `meta["lang"]` when it set one, else fastText (the model and
            sample LanguageID uses), asked only when the sample holds a CJK ideograph
    en_web  everything else: today's chain, which also keeps de, fr, es, it, pt and nl

Each chain splits at its first deduplication step: the steps before it judge one document at a time
(`filter_chains`; a `parallel.FilterPool` runs them in its workers), dedup and masking run afterwards in the
calling process, profile by profile. Duplicates are looked for within a profile in the batch, and across
profiles against the cross-batch index.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeline_project.cleaning.config import CleaningConfig, LanguageConfig
from pipeline_project.cleaning.config.profiles import PROFILE_NAMES
from pipeline_project.cleaning.records import Document, Dropped
from pipeline_project.cleaning.steps import (
    BoilerplateStrip,
    C4Quality,
    EncodingRepair,
    ExactDedup,
    FineWebQuality,
    GopherQuality,
    GopherRepetition,
    LanguageID,
    MinHashDedup,
    NonEmpty,
    PIIMasking,
    RunContext,
    Step,
    StepStats,
)
from pipeline_project.cleaning.steps.chinese import HAN, HanLanguageID
from pipeline_project.cleaning.steps.code import CodeQuality, SecretsMasking, code_path, language_of
from pipeline_project.cleaning.steps.decontaminate import Decontaminate

Positioned = list[tuple[int, Document]]  # documents with their position in the batch


def active_profiles(config: CleaningConfig) -> tuple[str, ...]:
    """The profiles documents can be routed to, in table order; en_web always."""
    p = config.profiles
    on = {"en_web": True, "zh_web": p.zh_web.enabled, "code": p.code.enabled, "books": p.books.enabled}
    return tuple(name for name in PROFILE_NAMES if name == "en_web" or (p.enabled and on[name]))


def zh_language_config(config: CleaningConfig) -> LanguageConfig:
    """CleaningConfig.language with zh_web's keep-list and minimum score."""
    z = config.profiles.zh_web
    return config.language.model_copy(update={"keep": z.language_keep, "min_score": z.language_min_score})


def build_chain(config: CleaningConfig, profile: str = "en_web") -> list[Step]:
    """One profile's chain, in FineWeb's order (dedup before masking, so masks never hide a duplicate)."""
    c, p = config, config.profiles
    dedup: list[tuple[bool, Callable[[], Step]]] = [
        (c.decontamination.enabled, lambda: Decontaminate(c.decontamination)),  # the last per-document step
        (c.dedup.exact.enabled, ExactDedup),
        (c.dedup.minhash.enabled, lambda: MinHashDedup(c.dedup.minhash)),
    ]
    repair = (c.encoding.enabled, lambda: EncodingRepair(c.encoding))
    if profile == "en_web":
        candidates = [
            repair,
            (c.boilerplate.enabled, lambda: BoilerplateStrip(c.boilerplate)),
            (True, NonEmpty),
            (c.language.enabled, lambda: LanguageID(c.language)),
            (c.gopher_repetition.enabled, lambda: GopherRepetition(c.gopher_repetition)),
            (c.gopher_quality.enabled, lambda: GopherQuality(c.gopher_quality)),
            (c.c4.enabled, lambda: C4Quality(c.c4)),
            (c.fineweb.enabled, lambda: FineWebQuality(c.fineweb)),
            *dedup,
            (c.pii.enabled, lambda: PIIMasking(c.pii)),
        ]
    elif profile == "zh_web":  # FineWeb-2's order: Gopher repetition, FineWeb quality, Gopher quality
        z = p.zh_web
        lang = zh_language_config(config)
        candidates = [
            repair,
            (c.boilerplate.enabled, lambda: BoilerplateStrip(c.boilerplate)),
            (True, NonEmpty),
            (lang.enabled, lambda: HanLanguageID(lang, z.han_script_min_fraction)),
            (z.gopher_repetition.enabled, lambda: GopherRepetition(z.gopher_repetition)),
            (z.fineweb.enabled, lambda: FineWebQuality(z.fineweb)),
            (z.gopher_quality.enabled, lambda: GopherQuality(z.gopher_quality)),
            *dedup,
            (c.pii.enabled, lambda: PIIMasking(c.pii)),
        ]
    elif profile == "code":  # files are kept byte for byte: no ftfy, no boilerplate cut, no language ID
        k = p.code
        candidates = [
            (True, NonEmpty),
            (k.filters.enabled, lambda: CodeQuality(k.filters, p.select.code.path_fields)),
            *dedup,
            (k.secrets.enabled, lambda: SecretsMasking(k.secrets, c.pii)),
        ]
    elif profile == "books":
        b = p.books
        candidates = [
            repair,
            (c.boilerplate.enabled, lambda: BoilerplateStrip(c.boilerplate, small_print=b.gutenberg_small_print)),
            (True, NonEmpty),
            (c.language.enabled, lambda: LanguageID(c.language)),
            (b.gopher_repetition.enabled, lambda: GopherRepetition(b.gopher_repetition)),
            (b.gopher_quality.enabled, lambda: GopherQuality(b.gopher_quality)),
            *dedup,
            (c.pii.enabled, lambda: PIIMasking(c.pii)),
        ]
    else:
        raise ValueError(f"unknown cleaning profile {profile!r}; the profiles are {PROFILE_NAMES}")
    return [make() for enabled, make in candidates if enabled]


def split_at_dedup(steps: list[Step]) -> tuple[list[Step], list[Step]]:
    """(the per-document steps before the first deduplication step, the rest)."""
    first = next((i for i, s in enumerate(steps) if isinstance(s, ExactDedup | MinHashDedup)), len(steps))
    return steps[:first], steps[first:]


def build_chains(config: CleaningConfig) -> dict[str, list[Step]]:
    return {name: build_chain(config, name) for name in active_profiles(config)}


def filter_chains(config: CleaningConfig) -> dict[str, list[Step]]:
    """Per profile, the steps of its chain that come before deduplication."""
    return {name: split_at_dedup(steps)[0] for name, steps in build_chains(config).items()}


class ProfileRouter:
    """`chains`: the chains the routed documents will go through; the router asks zh_web's language step
    (when there is one) ahead, so that step does not run fastText on the same text a second time."""

    def __init__(self, config: CleaningConfig, chains: dict[str, list[Step]] | None = None):
        self.config = config
        self.active = frozenset(active_profiles(config))
        sel = config.profiles.select
        self.code, self.books, self.zh_langs = sel.code, sel.books, frozenset(sel.zh_langs)
        self.languages = frozenset(self.code.extensions.values()) | frozenset(self.code.filenames.values())
        self.programs = self.languages - frozenset(self.code.not_programs)
        self.prefixes = tuple("/" + p.strip("/") + "/" for p in self.code.path_prefixes)
        zh_steps = (chains or {}).get("zh_web", [])
        self._lid: HanLanguageID | None = next((s for s in zh_steps if isinstance(s, HanLanguageID)), None)
        self._shared = self._lid is not None  # a step of a chain that will take the answers given ahead

    def select(self, doc: Document) -> str:
        profile = self._select(doc)
        doc.meta["domain"] = profile
        return profile

    def _select(self, doc: Document) -> str:
        if "code" in self.active:
            lang = self.code_language(doc)
            if lang is not None:
                doc.meta["lang"] = lang
                return "code"
        if "books" in self.active and self.is_book(doc):
            return "books"
        if "zh_web" in self.active and self.is_chinese(doc):
            return "zh_web"
        return "en_web"

    def code_language(self, doc: Document) -> str | None:
        """The file's language when the document is a source file, else None."""
        cfg = self.code
        fields = doc.meta.get("fields") or {}
        path = code_path(fields, cfg.path_fields) or doc.source
        by_suffix = language_of(path, cfg.extensions, cfg.filenames)
        declared = None
        for name in cfg.lang_fields:
            value = fields.get(name)
            if isinstance(value, str) and value.lower() in self.languages:
                declared = value.lower()
                break
        source = "/" + doc.source.lstrip("/")
        if by_suffix in self.programs or declared or any(p in source for p in self.prefixes):
            return by_suffix or declared or "unknown"
        return None

    def is_book(self, doc: Document) -> bool:
        cfg, n = self.books, len(doc.text)
        if cfg.long_form_min_chars is not None and n >= cfg.long_form_min_chars:
            return True
        if n < cfg.min_chars:
            return False
        source = doc.source.lower()
        if any(p in source for p in cfg.path_patterns):
            return True
        return cfg.gutenberg_header and "project gutenberg" in doc.text[: cfg.header_chars].lower()

    def forget(self) -> None:
        """Drop the language answers no chain took (their texts were changed, or the documents dropped)."""
        if self._lid is not None:
            self._lid.forget()

    def is_chinese(self, doc: Document) -> bool:
        given = doc.meta.get("lang")
        if given:
            return given in self.zh_langs
        if not HAN.search(doc.text, 0, self.config.language.max_chars * 2):
            return False
        if self._lid is None:
            zh = self.config.profiles.zh_web
            self._lid = HanLanguageID(zh_language_config(self.config), zh.han_script_min_fraction)
        lang, score = (self._lid.detect_ahead if self._shared else self._lid.detect)(doc.text)
        if lang in self.zh_langs:
            # the zh_web chain's language_id step replaces these; without that step its filters need them
            doc.meta["lang"], doc.meta["lang_score"] = lang, round(score, 4)
            return True
        return False


def run_filter_stage(
    router: ProfileRouter,
    chains: dict[str, list[Step]],
    docs: list[Document],
    batch_id: str,
    offset: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[dict[str, Positioned], list[Dropped], list[StepStats]]:
    """Route `docs` and run each profile's per-document steps: kept documents by profile with their batch
    positions (`offset` + index), the dropped ones, and the stats (`profile_select` first)."""
    start = clock()
    groups: dict[str, Positioned] = {name: [] for name in chains}
    for i, doc in enumerate(docs):
        groups[router.select(doc)].append((offset + i, doc))
    select = StepStats("profile_select", docs_in=len(docs), seconds=clock() - start)
    select.notes.update({name: len(group) for name, group in groups.items() if group})
    ctx = RunContext(batch_id=batch_id)
    kept: dict[str, Positioned] = {}
    dropped: list[Dropped] = []
    stats = [select]
    for name, steps in chains.items():
        if groups[name]:
            kept[name] = run_chain(steps, groups[name], ctx, name, dropped, stats, clock)
    router.forget()
    return kept, dropped, stats


def run_chain(
    steps: list[Step],
    items: Positioned,
    ctx: RunContext,
    profile: str,
    dropped: list[Dropped],
    stats: list[StepStats],
    clock: Callable[[], float] = time.perf_counter,
) -> Positioned:
    """Run `steps` over one profile's documents; appends to `dropped` and `stats`, returns the kept ones."""
    position = {id(doc): i for i, doc in items}
    docs = [doc for _, doc in items]
    for step in steps:
        s = StepStats(step.name, docs_in=len(docs), profile=profile)
        start = clock()
        docs, gone = step.run(docs, ctx, s)
        s.seconds = clock() - start
        dropped.extend(gone)
        stats.append(s)
    return [(position[id(doc)], doc) for doc in docs]
