"""A producing process to kill: `python -m pipeline_project_harness.reliability.produce_worker --bootstrap ... --topic ...`.

Produces sequence blocks `0 .. blocks-1` under one ledger key with `produce_blocks` (bounded transactions, each with
its ledger record). With `--slow-link S` every data message waits S seconds first, so the transaction stays open
long enough for a test to SIGKILL this process inside it. Prints `IN_TRANSACTION` when the first data message goes
out inside a transaction, and `REPORT {"reused": ..., "ledger": <the completion record>}` at the end.
"""

from __future__ import annotations

import argparse
import json
import sys

from pipeline_project.streaming.produce.producer import produce_blocks
from pipeline_project.streaming.produce.request import ProducerConfig, ProduceRequest
from pipeline_project_harness.reliability.faults import SlowLinkKafkaSettings
from pipeline_project_harness.reliability.invariants import SEQ_TOKENIZER, seq_blocks

IN_TRANSACTION = "IN_TRANSACTION"
REPORT = "REPORT "


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--ledger-key", required=True)
    parser.add_argument("--blocks", type=int, required=True)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--message-blocks", type=int, default=64)
    parser.add_argument("--slow-link", type=float, default=0.0, help="seconds before each data message")
    parser.add_argument("--transaction-bytes", type=int, default=None, help="ProducerConfig.transaction_max_bytes")
    args = parser.parse_args(argv)

    settings = SlowLinkKafkaSettings(
        bootstrap_servers=args.bootstrap, client_id="reliability", produce_delay_s=args.slow_link
    )
    settings._on_first_data = lambda: print(IN_TRANSACTION, flush=True)
    bounded = {"transaction_max_bytes": args.transaction_bytes} if args.transaction_bytes else {}
    report = produce_blocks(
        settings,
        ProduceRequest(
            topic=args.topic,
            ledger_key=args.ledger_key,
            content_hash=f"seq-0-{args.blocks}",
            source=args.ledger_key,
            seq_len=args.seq_len,
            tokenizer=SEQ_TOKENIZER,
            config=ProducerConfig(max_message_bytes=args.message_blocks * args.seq_len * 4, **bounded),
        ),
        [seq_blocks(0, args.blocks, args.seq_len)],
    )
    print(REPORT + json.dumps({"reused": report.reused, "ledger": json.loads(report.to_ledger_json())}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
