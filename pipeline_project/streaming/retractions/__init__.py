"""Retractions: blocks of the token topic that no training step may read any more, as durable, ordered data.

A retraction (`model.Retraction`) names messages or blocks of the topic with a reason and a request id. They live
in the compacted topic `<topic>.retractions` (`topic.py`), keyed by request id, so writing a request again is a
no-op and every reader sees the same requests in the same order. The loader reads them into a `RetractionIndex`
(`index.py`) at start and again every `refresh_s` while it runs (`feed.RetractionFeed`), and its assembler skips
a retracted block as it would pass a transaction marker: the cursor moves over it, no row holds it, and the step
that skipped it records it (`Batch.retracted`, the step log's `retracted`). A block a rank had already trained
before the retraction reached it is an exposure, not a skip: the step logs say which steps read it.
"""

from pipeline_project.streaming.retractions.index import RetractionIndex
from pipeline_project.streaming.retractions.model import BlockRange, Retraction

__all__ = ["BlockRange", "Retraction", "RetractionIndex"]
