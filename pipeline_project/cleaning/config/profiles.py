"""Versioned configuration of the cleaning profiles (`profiles.py`): how a document's profile is chosen, and
each profile's own thresholds. A field of `CleaningConfig` (`profiles`), so it is part of the config hash.

    en_web   today's chain, configured by CleaningConfig's own step fields (FineWeb's English web chain)
    zh_web   FineWeb-2's published settings for Mandarin Chinese (huggingface/fineweb-2 `configs/cmn_Hani.yml`
             and the filter arguments of its `fineweb-2-pipeline.py`)
    code     The Stack v2 / StarCoder2 basic and language-specific file filters (StarCoder2 paper, section 2.1),
             plus the XML and JSON/YAML size rules of StarCoder / DeepSeek-Coder
    books    long form: no C4 or FineWeb line rules, a book-sized length range, Gutenberg header and footer cut

A document's `meta["domain"]` is its profile's name. Web pages in the other kept languages (de, fr, es, it,
pt, nl) go through en_web, today's chain with their own stop words, and so carry domain "en_web".
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from pipeline_project.cleaning.config.steps import (
    FineWebConfig,
    GopherQualityConfig,
    GopherRepetitionConfig,
)

PROFILE_NAMES: tuple[str, ...] = ("en_web", "zh_web", "code", "books")

# FineWeb-2 configs/cmn_Hani.yml `stopwords` (traditional and simplified forms, and the middle dot)
FINEWEB2_CMN_STOPWORDS: tuple[str, ...] = (
    *("的", "年", "在", "月", "是", "和", "日", "了", "於", "·", "為"),
    *("有", "被", "人", "中", "为", "他", "與", "後", "也", "而", "由"),
)

# file suffix -> language, names as The Stack / GitHub linguist spell them (lower-cased)
CODE_EXTENSIONS: dict[str, str] = {
    **{".py": "python", ".pyi": "python", ".pyx": "cython", ".ipynb": "jupyter notebook"},
    **{".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript"},
    **{".ts": "typescript", ".tsx": "typescript", ".rs": "rust", ".go": "go", ".java": "java"},
    **{".c": "c", ".h": "c", ".cc": "c++", ".cpp": "c++", ".cxx": "c++", ".hpp": "c++", ".hh": "c++"},
    **{".cs": "c#", ".kt": "kotlin", ".kts": "kotlin", ".swift": "swift", ".scala": "scala", ".rb": "ruby"},
    **{".php": "php", ".lua": "lua", ".pl": "perl", ".pm": "perl", ".r": "r", ".jl": "julia", ".dart": "dart"},
    **{".sh": "shell", ".bash": "shell", ".zsh": "shell", ".ps1": "powershell", ".sql": "sql"},
    **{".hs": "haskell", ".ml": "ocaml", ".ex": "elixir", ".exs": "elixir", ".erl": "erlang", ".clj": "clojure"},
    **{".m": "objective-c", ".mm": "objective-c++", ".f90": "fortran", ".zig": "zig", ".nim": "nim"},
    **{".asm": "assembly", ".s": "assembly", ".wat": "webassembly", ".wast": "webassembly", ".cmake": "cmake"},
    **{".html": "html", ".htm": "html", ".css": "css", ".scss": "scss", ".vue": "vue", ".svelte": "svelte"},
    **{".md": "markdown", ".rst": "restructuredtext", ".tex": "tex", ".txt": "text", ".xml": "xml"},
    **{".xsl": "xslt", ".xslt": "xslt", ".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml"},
    **{".dot": "graphviz (dot)", ".gv": "graphviz (dot)", ".owl": "web ontology language", ".smt2": "smt"},
    **{".1": "roff manpage", ".roff": "roff", ".proto": "protocol buffer", ".mod": "module"},
}
# whole file names with a language of their own
CODE_FILENAMES: dict[str, str] = {
    "makefile": "makefile",
    "dockerfile": "dockerfile",
    "cmakelists.txt": "cmake",
    "requirements.txt": "text",
}
# languages that are data, markup or prose: a JSONL `path` field ending so does not by itself make a record
# code (a web dataset may carry `path: /about.html`); under a code prefix or with a `lang` field it does
NOT_PROGRAMS: tuple[str, ...] = (
    *("html", "css", "markdown", "restructuredtext", "tex", "text", "xml", "json", "yaml", "toml"),
    *("graphviz (dot)", "web ontology language", "roff", "roff manpage", "jupyter notebook"),
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Step(_Model):
    enabled: bool = True


class CodeSelectConfig(_Model):
    """A document is code when its source key is under one of `path_prefixes`, when a JSONL field in
    `lang_fields` names a programming language, or when a field in `path_fields` ends in a program suffix.
    Checked before language ID (code is not natural language). The language comes from the file suffix."""

    path_prefixes: tuple[str, ...] = ("code/",)
    path_fields: tuple[str, ...] = ("path", "file_path", "filepath", "filename", "max_stars_repo_path")
    lang_fields: tuple[str, ...] = ("lang", "language", "programming_language")
    extensions: dict[str, str] = Field(default_factory=lambda: dict(CODE_EXTENSIONS))
    filenames: dict[str, str] = Field(default_factory=lambda: dict(CODE_FILENAMES))
    not_programs: tuple[str, ...] = NOT_PROGRAMS


class BooksSelectConfig(_Model):
    """Books: a path hint or a Project Gutenberg header, and at least `min_chars`; or, with no hint at all, at
    least `long_form_min_chars`. The en_web chain drops every document over 100k words (about 550k characters
    of English) as gopher_long_doc, so a hint-less document that long is long form, not a web page (the
    longest page in the corpus's web_noisy is 139k characters)."""

    path_patterns: tuple[str, ...] = ("gutenberg", "books/")
    gutenberg_header: bool = True
    header_chars: int = 4000  # where "Project Gutenberg" must appear (the title line, or the old-style notice)
    min_chars: int = 20_000
    long_form_min_chars: int | None = 500_000


class SelectConfig(_Model):
    code: CodeSelectConfig = CodeSelectConfig()
    books: BooksSelectConfig = BooksSelectConfig()
    # languages that go to zh_web. Before the chain runs, a document with no CJK ideograph in its first
    # `language.max_chars` characters cannot be Chinese; the others get the fastText check LanguageID uses
    zh_langs: tuple[str, ...] = ("zh",)


class ZhWebConfig(_Model):
    """FineWeb-2 for cmn_Hani: configs/cmn_Hani.yml values, and the fixed arguments of fineweb-2-pipeline.py
    (GopherRepetition: dup_para_frac, dup_line_char_frac, dup_para_char_frac = 0; FineWebQuality:
    short_line_thr = 999 i.e. off, char_duplicates_ratio = 0.1; GopherQuality: min_stop_words = 2; no C4).
    Words come from jieba (DataTrove's cmn_Hani tokenizer is spaCy "zh" with the jieba segmenter); the line
    punctuation rule counts CJK terminal punctuation (。！？ and the other Unicode Sentence_Terminal marks)."""

    enabled: bool = True
    # the language_id step is CleaningConfig.language with these two fields replaced
    language_keep: tuple[str, ...] = ("zh",)
    language_min_score: float = 0.692  # cmn_Hani.yml language_score (FineWeb-2 scored with GlotLID)
    # Han-only text (no kana, no hangul, at least this fraction of the letters Han) is Chinese whatever
    # fastText says (steps/chinese.py); None turns the rule off
    han_script_min_fraction: float | None = 0.8
    gopher_repetition: GopherRepetitionConfig = GopherRepetitionConfig(
        dup_line_frac=0.287,
        dup_para_frac=0,
        dup_line_char_frac=0,
        dup_para_char_frac=0,
        top_n_grams=((2, 0.256), (3, 0.201), (4, 0.171)),
        dup_n_grams=((5, 0.198), (6, 0.182), (7, 0.167), (8, 0.154), (9, 0.14), (10, 0.127)),
    )
    fineweb: FineWebConfig = FineWebConfig(
        line_punct_thr=0.106,
        short_line_thr=999,
        char_duplicates_ratio=0.1,
        new_line_ratio=0.178,
        short_line_length_by_lang={},
    )
    gopher_quality: GopherQualityConfig = GopherQualityConfig(
        min_avg_word_length=1,
        max_avg_word_length=5,
        max_non_alpha_words_ratio=0.735,
        min_stop_words=2,
        stop_words={"zh": FINEWEB2_CMN_STOPWORDS},
        lang_overrides={},
    )


class CodeFilterConfig(_Step):
    """StarCoder2 / The Stack v2 basic filters (paper section 2.1), in its order."""

    # long line filters
    max_lines: int = 100_000
    max_avg_line_length: float = 100
    max_line_length: int = 1000
    long_line_exempt: tuple[str, ...] = (
        *("html", "json", "markdown", "roff", "roff manpage", "smt", "tex", "text", "xml"),
    )
    exempt_max_line_length: int = 100_000
    # autogenerated filter: go-enry's is_generated (file names, and the content rules of the languages here)
    # plus these phrases in the first lines
    autogenerated: bool = True
    autogen_phrases: tuple[str, ...] = (
        *("auto-generated", "autogenerated", "automatically generated"),
        *("generated automatically", "this file is generated"),
    )
    autogen_scan_lines: int = 5
    # alpha filter: alphabetic characters; alphanumeric for the languages in alnum_languages
    min_alpha_fraction: float = 0.25
    alnum_languages: tuple[str, ...] = ("assembly", "webassembly")
    # encoded data filter: base64, hex and \\u sequences
    encoded_max_match: int = 1024
    encoded_max_fraction: float = 0.5
    # language-specific filters
    data_languages: tuple[str, ...] = ("text", "json", "yaml", "web ontology language", "graphviz (dot)")
    data_max_lines: int = 512
    text_keep_names: tuple[str, ...] = ("readme", "notes", "todo", "description", "cmakelists")
    text_keep_substring: str = "requirement"
    html_min_visible_chars: int = 100
    html_min_visible_fraction: float = 0.2
    # StarCoder (v1) and DeepSeek-Coder: no XML files (except XSLT), JSON / YAML of 50..5000 characters only
    xml_header: bool = True
    json_yaml_chars: tuple[int, int] | None = (50, 5000)


class SecretsConfig(_Step):
    """Secrets in code are masked; natural-language PII rules (phone numbers, IP addresses) are not applied to
    code, whose numbers and version strings they would rewrite. E-mail addresses are masked (`emails`)."""

    mask: str = "|||SECRET|||"
    emails: bool = True
    # a quoted value assigned to a name like `password` / `api_key` is a secret when it is at least this long
    # and this random (Shannon entropy in bits per character); placeholders like "changeme" stay
    assignment_min_chars: int = 8
    assignment_min_entropy: float = 3.0


class CodeConfig(_Model):
    enabled: bool = True
    filters: CodeFilterConfig = CodeFilterConfig()
    secrets: SecretsConfig = SecretsConfig()


class BooksConfig(_Model):
    """Long form. Gopher rules with a book-sized length range; no C4 (it drops every line of under three
    words and any book with a "{") and no FineWeb line rules (written for web-extraction artefacts; a
    hard-wrapped book ends few lines in punctuation). Line and paragraph repetition is off, as FineWeb-2 has
    it, because refrains, verse and stage directions repeat on purpose; the n-gram rules stay."""

    enabled: bool = True
    # cut the pre-2003 header too ("*END*THE SMALL PRINT! ...*END*") when there is no START marker
    gutenberg_small_print: bool = True
    gopher_repetition: GopherRepetitionConfig = GopherRepetitionConfig(
        dup_line_frac=0, dup_para_frac=0, dup_line_char_frac=0, dup_para_char_frac=0
    )
    # Gopher's 100k-word cap would drop most novels; under 500 words is a pamphlet or a stub. Punctuation
    # tokens count as words in the alphabetic-word ratio (as in DataTrove), and dialogue, verse and plays
    # punctuate heavily: the corpus's 46 Gutenberg books and Tiny Shakespeare have 0.687..0.870 (0.8 drops 14)
    gopher_quality: GopherQualityConfig = GopherQualityConfig(
        min_doc_words=500,
        max_doc_words=2_000_000,
        max_non_alpha_words_ratio=0.65,
    )


class ProfilesConfig(_Model):
    """`enabled=False` sends every document through en_web (the chain before profiles existed)."""

    enabled: bool = True
    select: SelectConfig = SelectConfig()
    zh_web: ZhWebConfig = ZhWebConfig()
    code: CodeConfig = CodeConfig()
    books: BooksConfig = BooksConfig()
