"""`pipeline-project dedup-import`: an earlier version's S3 index file into a cross-batch `DedupIndex`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np

from pipeline_project.cleaning.dedup.index import DedupIndex
from pipeline_project.cleaning.dedup.local import LocalIndex
from pipeline_project.cleaning.dedup.upgrade import band_numbers
from pipeline_project.cleaning.errors import CleaningError


def import_local_index(
    target: DedupIndex,
    index: LocalIndex,
    hold: Callable[[str], AbstractContextManager] = lambda _batch: contextlib.nullcontext(),
) -> int:
    """Copy an earlier version's S3 index file (`LocalIndex.from_bytes`) in, batch by batch, each while `hold(batch)`
    (the deployment's batch lock: a run or command writing that batch meanwhile waits); returns the count."""
    imported = 0
    batch_of = np.asarray(index.doc_batch)
    exact_by_entry = np.zeros(len(index), dtype=np.uint64)
    exact_by_entry[index.exact_entries] = index.exact_keys
    # each band key at its band number (the index's band columns), found again from the entry's signature
    bands_by_entry = np.zeros((len(index), index.num_bands), dtype=np.uint64)
    for key, entry in zip(index.band_keys.tolist(), index.band_entries.tolist()):
        where = band_numbers(index.signatures[entry].tobytes(), index.num_perm, index.num_bands)
        band = where.get(int(np.uint64(key).view(np.int64)))
        if band is None:
            raise CleaningError(f"the index file's band key {key} matches none of its entry's bands: not importing")
        bands_by_entry[entry, band] = key
    for b, batch_id in enumerate(index.batches):
        rows = np.flatnonzero(batch_of == b)
        with hold(batch_id):
            target.commit_batch(
                batch_id,
                [index.doc_ids[i] for i in rows],
                exact_by_entry[rows],
                bands_by_entry[rows],
                index.signatures[rows],
                near_threshold=2.0,  # an import keeps every document: nothing is similar enough to drop
            )
        imported += len(rows)
    return imported
