"""Archives of files (a repository as .tar, .tar.gz, .tgz, .tar.zst or .zip), read member by member.

Each member is read as an object of its own by `read_member` (the readers' dispatch, passed in: a source file
becomes a code document with its path in the repository, a JSONL member one document per line, a member with no
reader `unsupported_format`), under the id `archive!member`; every record keeps the archive's key as its source.
So each member is accounted for: kept, or quarantined with its reason. Directories are structure, not members
with content, and yield nothing; links, devices and FIFOs are `not_a_regular_file`; a tar or zip inside is
`nested_archive` (never opened: no recursion).

Limits: a tar is streamed (tarfile's "r|" mode over the inflated pieces), so the gzip / zstd cap
`reader.max_decompressed_bytes` bounds the whole archive, as it does a JSONL object; each member has the limits
of its format. A zip is indexed at its end, so it is spooled (`streams.spool`) and its members' declared sizes
(which zipfile holds their output to) may add up to at most `reader.max_decompressed_bytes`: the members past it
are `decompressed_too_large`. Where the archive is cut or corrupt, the members before are kept and the rest is
one record (`truncated_archive` / `corrupt_archive`).
"""

from __future__ import annotations

import dataclasses
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.read.formats import exc_detail
from pipeline_project.cleaning.read.streams import StreamCut, member_blocks, reader_over, spool
from pipeline_project.cleaning.read.suffixes import CONTAINERS, split_suffix
from pipeline_project.cleaning.records import Document, Quarantined

# (member key, its blocks, its path in the archive) -> its records; never raises on input but StreamCut
MemberReader = Callable[[str, Iterable[bytes], str], Iterator[Document | Quarantined]]

_TAR_ERRORS = (tarfile.TarError, EOFError, OSError, zlib.error)
_ZIP_ERRORS = (zipfile.BadZipFile, EOFError, OSError, zlib.error, NotImplementedError, RuntimeError, ValueError)


def _owned(records: Iterable[Document | Quarantined], key: str) -> Iterator[Document | Quarantined]:
    """A member's records, with the archive's key as their source."""
    for r in records:
        if isinstance(r, Document):
            r.source = key
            yield r
        else:
            yield dataclasses.replace(r, source=key)


def _refused(key: str, member_key: str, name: str) -> Quarantined | None:
    kind = split_suffix(name)
    if kind is not None and kind[0] in CONTAINERS:
        return Quarantined(member_key, key, "nested_archive", "an archive inside an archive is not opened")
    return None


def _watched_headers(stops: list[BaseException]) -> type[tarfile.TarInfo]:
    """A TarInfo that notes why reading a header failed: tarfile ends its iteration quietly on a cut or invalid
    header past the first, which would lose the rest of the archive without a record."""

    class Watched(tarfile.TarInfo):
        @classmethod
        def fromtarfile(cls, tar):
            try:
                return super().fromtarfile(tar)
            except tarfile.HeaderError as exc:
                stops.append(exc)
                raise

    return Watched


def _quiet_end(stops: list[BaseException]) -> tuple[str, str] | None:
    """(reason, detail) when the tar's iteration ended on a header that is cut or invalid, not on its end."""
    if not stops or isinstance(stops[-1], tarfile.EOFHeaderError | tarfile.EmptyHeaderError):
        return None  # the end-of-archive blocks, or the data ends on a member boundary: nothing is lost
    if isinstance(stops[-1], tarfile.TruncatedHeaderError):
        return "truncated_archive", "tar: the data ends inside a member header"
    return "corrupt_archive", f"tar: {type(stops[-1]).__name__} {stops[-1]}"[:150]


def read_tar(
    key: str,
    pieces: Iterable[bytes],
    outcome: list[tuple[str, str]],
    config: CleaningConfig,
    read_member: MemberReader,
) -> Iterator[Document | Quarantined]:
    """The records of every member of a tar given as decompressed `pieces` (`outcome`: where they failed)."""
    members, stops = 0, []
    try:
        with tarfile.open(fileobj=reader_over(pieces), mode="r|", tarinfo=_watched_headers(stops)) as tar:
            for info in tar:
                if info.isdir():
                    continue
                members += 1
                member_key = f"{key}!{info.name}"
                if not info.isfile():
                    yield Quarantined(member_key, key, "not_a_regular_file", "a link, device or FIFO")
                    continue
                refused = _refused(key, member_key, info.name)
                if refused is not None:
                    yield refused
                    continue
                f = tar.extractfile(info)
                blocks = member_blocks(f, info.name[:80], _TAR_ERRORS) if f is not None else iter(())
                yield from _owned(read_member(member_key, blocks, info.name), key)
    except StreamCut as cut:
        yield Quarantined(key, key, *(outcome[0] if outcome else (cut.reason, cut.detail)))
        return
    except _TAR_ERRORS as exc:
        if not outcome:
            reason = "truncated_archive" if "unexpected end" in str(exc) else "corrupt_archive"
            yield Quarantined(key, key, reason, f"tar, after {members} members: " + exc_detail(exc, config))
        else:
            yield Quarantined(key, key, *outcome[0])
        return
    quiet = _quiet_end(stops)
    if outcome or quiet:
        yield Quarantined(key, key, *(outcome[0] if outcome else quiet))


def read_zip(
    key: str,
    pieces: Iterable[bytes],
    outcome: list[tuple[str, str]],
    config: CleaningConfig,
    read_member: MemberReader,
) -> Iterator[Document | Quarantined]:
    """The records of every member of a zip given as `pieces` (`outcome`: where they failed)."""
    with spool(pieces) as f:
        if outcome:
            yield Quarantined(key, key, *outcome[0])
            return
        try:
            archive = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, *_ZIP_ERRORS) as exc:
            yield Quarantined(key, key, "corrupt_archive", "zip: " + exc_detail(exc, config))
            return
        with archive:
            yield from _zip_members(key, archive, config, read_member)


def _zip_members(key: str, archive: zipfile.ZipFile, config: CleaningConfig, read_member: MemberReader):
    room = config.reader.max_decompressed_bytes
    for info in archive.infolist():
        if info.is_dir():
            continue
        member_key = f"{key}!{info.filename}"
        refused = _refused(key, member_key, info.filename)
        if refused is not None:
            yield refused
            continue
        if info.flag_bits & 0x1:
            yield Quarantined(member_key, key, "unsupported_format", "an encrypted zip member")
            continue
        if info.file_size > room:
            yield Quarantined(member_key, key, "decompressed_too_large", f"the members inflate past {room} bytes")
            continue
        room -= info.file_size
        try:
            with archive.open(info) as f:
                blocks = member_blocks(f, info.filename[:80], _ZIP_ERRORS)
                yield from _owned(read_member(member_key, blocks, info.filename), key)
        except StreamCut as cut:  # this member's bytes are bad (its CRC, its method): the next ones may be fine
            yield Quarantined(member_key, key, cut.reason, cut.detail)
        except _ZIP_ERRORS as exc:  # opening the member failed: an unsupported method, a bad local header
            reason = "unsupported_format" if isinstance(exc, NotImplementedError) else "corrupt_archive"
            yield Quarantined(member_key, key, reason, "zip member: " + exc_detail(exc, config))
