"""Which keys have a reader, and as what: the one table of suffixes that ingest and the readers share.

    .txt                    text: one document per object
    .jsonl, .json           JSON Lines: one document per line
    .html, .htm             one document per page (trafilatura, when `reader.extract_html`)
    .py, .go, .rs, ...      source files (`SOURCE_EXTENSIONS`): one document per file, for the code profile
    .warc, .wet             WARC / WET (Common Crawl): one document per conversion, or per HTML response
    .tar, .tgz              archives of repositories: read member by member
    .parquet                one document per row (not compressed again: Parquet compresses its pages)
    .zip                    read member by member (not compressed again)

Each format but Parquet and zip may also be compressed (.gz, .zst, .zstd; `archives.py`).
"""

from __future__ import annotations

from pipeline_project.cleaning.config.profiles import CODE_EXTENSIONS, NOT_PROGRAMS
from pipeline_project.cleaning.read.archives import COMPRESSION_SUFFIXES

# file suffix -> language: the program suffixes of the code profile's table (as The Stack names languages);
# markup and data suffixes (.md, .json, .xml, ...) are not source files here, and .html / .txt have formats of
# their own
SOURCE_EXTENSIONS: dict[str, str] = {
    ext: lang for ext, lang in CODE_EXTENSIONS.items() if lang not in NOT_PROGRAMS and ext not in (".txt", ".html")
}

# suffix -> how the (decompressed) bytes are read
FORMATS: dict[str, str] = {
    ".txt": "text",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".html": "html",
    ".htm": "html",
    ".parquet": "parquet",
    ".warc": "warc",
    ".wet": "warc",
    ".tar": "tar",
    ".zip": "zip",
    **dict.fromkeys(SOURCE_EXTENSIONS, "source"),
}
# formats read from a seekable copy of the whole object, never under a compression suffix
UNCOMPRESSED: frozenset[str] = frozenset({"parquet", "zip"})
# formats whose members are objects of their own: an archive inside one of them is not opened
CONTAINERS: frozenset[str] = frozenset({"tar", "zip"})
# suffixes that name a format and a codec at once
COMPOUND: dict[str, tuple[str, str]] = {".tgz": ("tar", "gzip")}

SUPPORTED_SUFFIXES: tuple[str, ...] = (
    *(
        base + comp
        for base, fmt in FORMATS.items()
        for comp in ("", *(() if fmt in UNCOMPRESSED else COMPRESSION_SUFFIXES))
    ),
    *COMPOUND,
)


def split_suffix(key: str) -> tuple[str, str | None] | None:
    """(format, codec named by the suffix) for a supported key, else None. Case-insensitive."""
    lower = key.lower()
    for ext, kind in COMPOUND.items():
        if lower.endswith(ext):
            return kind
    codec = None
    for ext, name in COMPRESSION_SUFFIXES.items():
        if lower.endswith(ext):
            lower, codec = lower[: -len(ext)], name
            break
    dot = lower.rfind(".")
    fmt = FORMATS.get(lower[dot:]) if dot >= 0 and "/" not in lower[dot:] else None
    if fmt is None or (codec is not None and fmt in UNCOMPRESSED):
        return None
    return fmt, codec


def is_supported(key: str) -> bool:
    return split_suffix(key) is not None


def format_of(key: str) -> str:
    """The supported suffix a key ends with (`.jsonl.gz`), or "other"; for metadata."""
    lower = key.lower()
    return max((s for s in SUPPORTED_SUFFIXES if lower.endswith(s)), key=len, default="other")


def source_path(key: str) -> str:
    """A source file's path: its key without the compression suffix."""
    lower = key.lower()
    for ext in COMPRESSION_SUFFIXES:
        if lower.endswith(ext):
            return key[: -len(ext)]
    return key


def source_language(path: str) -> str | None:
    """The language a source file's suffix stands for (`SOURCE_EXTENSIONS`), or None."""
    lower = path.lower()
    dot = lower.rfind(".")
    return SOURCE_EXTENSIONS.get(lower[dot:]) if dot >= 0 else None
