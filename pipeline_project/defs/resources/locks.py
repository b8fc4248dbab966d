"""The per-batch exclusion as a resource (`common.batch_lock`): the assets that write a batch's published state
hold it, as the operator commands that rewrite that state do."""

from __future__ import annotations

from contextlib import AbstractContextManager

import dagster as dg


class BatchLocks(dg.ConfigurableResource):
    postgres_url: str = ""
    """The database every writer of the deployment shares (the dedup index's); "" holds batches within this
    process only (tests, one writer)."""
    wait_s: float = 600.0
    """How long a run waits for a batch another run or command holds, then fails (and is retried)."""

    def hold(self, batch_id: str) -> AbstractContextManager[None]:
        from pipeline_project.common.batch_lock import batch_lock, local_batch_lock

        if not self.postgres_url:
            return local_batch_lock(batch_id, self.wait_s)
        return batch_lock(self.postgres_url, batch_id, self.wait_s)
