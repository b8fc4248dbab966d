"""AppCDS (class-data sharing) for the Kafka brokers: dump the loaded classes once, map them on later starts.

The broker stopped first (highest id, a clean exit) dumps the classes it loaded; later starts map that archive
instead of parsing ~10k classes from the jars again. A stale archive is ignored (-Xshare:auto).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from pipeline_project.stack.jars import jars_dir, pom_digest

QUIET = "-Xlog:cds=off,cds+dynamic=off"


def archive_path(component: str) -> Path:
    """The archive shared by every state dir, next to the component's jars it was built from (keyed by the pom)."""
    return jars_dir(component).parent / f"{component}-classes-{pom_digest(component)[:12]}.jsa"


@dataclass(frozen=True)
class ClassDataSharing:
    """JVM options that use or build one AppCDS archive, and the step that publishes a finished dump."""

    archive: Path
    """Where the published archive lives (see `archive_path`)."""
    dump: Path
    """Where the dumping JVM writes its archive at exit, before `publish` moves it to `archive`."""

    def jvm_opts(self, *, dumps: bool) -> tuple[str, ...]:
        """Options for one JVM: map the archive if it exists, else dump at exit if `dumps`, else nothing."""
        if self.archive.exists():
            return ("-Xshare:auto", f"-XX:SharedArchiveFile={self.archive}", QUIET)
        if dumps:
            return (f"-XX:ArchiveClassesAtExit={self.dump}", QUIET)
        return ()

    def publish(self) -> None:
        """Move a finished dump to the archive path (once: an existing archive wins) and delete the dump."""
        dump = self.dump
        if not dump.exists() or dump.stat().st_size == 0:
            return
        if not self.archive.exists():
            staging = self.archive.with_suffix(f".{os.getpid()}.tmp")
            shutil.copyfile(dump, staging)
            os.replace(staging, self.archive)  # atomic: a starting broker never maps a half-written archive
        dump.unlink(missing_ok=True)
