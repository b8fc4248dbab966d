"""librdkafka statistics (`stats_cb`) collected into a throughput summary.

Pass a `KafkaStats` to `KafkaSettings.make_producer` / `make_consumer` (with `statistics_interval_ms`
> 0); `summary()` is safe to call from any thread while samples arrive.
"""

from __future__ import annotations

import json
import threading
from typing import Any


class KafkaStats:
    """`stats_cb` collector: parses librdkafka statistics JSON and summarises throughput.

    Top-level counters are cumulative, so the latest sample holds the totals; the `batchsize`
    and `rtt` windows reset every interval, so they are combined across samples weighted by count.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.samples = 0
        self._first: dict[str, Any] | None = None
        self._last: dict[str, Any] | None = None
        self._batch_sum = 0.0
        self._batch_cnt = 0
        self._rtt_sum = 0.0
        self._rtt_cnt = 0
        self._rtt_p99_max = 0.0

    def __call__(self, stats_json: str) -> None:
        self.add(json.loads(stats_json))

    def add(self, stats: dict[str, Any]) -> None:
        with self._lock:
            self.samples += 1
            if self._first is None:
                self._first = stats
            self._last = stats
            for topic in (stats.get("topics") or {}).values():
                window = topic.get("batchsize") or {}
                cnt = int(window.get("cnt", 0))
                if cnt:
                    self._batch_sum += float(window.get("avg", 0)) * cnt
                    self._batch_cnt += cnt
            for broker in (stats.get("brokers") or {}).values():
                if broker.get("nodeid", -1) < 0:  # bootstrap and logical (coordinator) handles
                    continue
                window = broker.get("rtt") or {}
                cnt = int(window.get("cnt", 0))
                if cnt:
                    self._rtt_sum += float(window.get("avg", 0)) * cnt
                    self._rtt_cnt += cnt
                    self._rtt_p99_max = max(self._rtt_p99_max, float(window.get("p99", 0)))

    def summary(self) -> dict[str, float | int]:
        with self._lock:
            last = self._last or {}
            first = self._first or {}
            elapsed_s = (last.get("ts", 0) - first.get("ts", 0)) / 1e6
            tx_msgs = int(last.get("txmsgs", 0))
            tx_msg_bytes = int(last.get("txmsg_bytes", 0))
            d_msgs = tx_msgs - int(first.get("txmsgs", 0))
            d_bytes = tx_msg_bytes - int(first.get("txmsg_bytes", 0))
            d_rx = int(last.get("rxmsgs", 0)) - int(first.get("rxmsgs", 0))
            return {
                "samples": self.samples,
                "tx_bytes": int(last.get("tx_bytes", 0)),
                "rx_bytes": int(last.get("rx_bytes", 0)),
                "tx_msgs": tx_msgs,
                "tx_msg_bytes": tx_msg_bytes,
                "rx_msgs": int(last.get("rxmsgs", 0)),
                "rx_msg_bytes": int(last.get("rxmsg_bytes", 0)),
                "batch_size_avg_bytes": self._batch_sum / self._batch_cnt if self._batch_cnt else 0.0,
                "broker_rtt_avg_ms": self._rtt_sum / self._rtt_cnt / 1000 if self._rtt_cnt else 0.0,
                "broker_rtt_p99_ms": self._rtt_p99_max / 1000,
                "tx_msgs_per_s": d_msgs / elapsed_s if elapsed_s > 0 else 0.0,
                "tx_mb_per_s": d_bytes / elapsed_s / 1e6 if elapsed_s > 0 else 0.0,
                "rx_msgs_per_s": d_rx / elapsed_s if elapsed_s > 0 else 0.0,
            }
