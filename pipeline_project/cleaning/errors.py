"""The cleaning library's errors: every one subclasses `CleaningError`."""

from __future__ import annotations


class CleaningError(Exception):
    """Base of the errors the cleaning library raises."""


class CountsMismatchError(CleaningError):
    """A batch's documents do not add up: in != kept + dropped + quarantined."""


class IndexFormatError(CleaningError, ValueError):
    """A stored dedup index this version cannot read."""


class TruncatedArchiveError(CleaningError):
    """An archive ended before its end-of-stream marker; `args[0]` holds the bytes recovered before the cut."""


class DecompressedTooLargeError(CleaningError):
    """An archive inflates past the configured limit (a decompression bomb, or just too big)."""


class DocumentTooLargeError(CleaningError):
    """A document grows past the document limit while it is transcoded."""


class UndecodableError(CleaningError):
    """No text encoding fits the bytes."""
