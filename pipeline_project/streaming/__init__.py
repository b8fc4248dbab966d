"""Token blocks on Kafka, plain Python (no Dagster).

Producer side: `kafka_client` (settings, tuned clients, topics, stats, delivery errors), `format`
(wire format), `tokenizer` (offline DeepSeek fast tokenizer), `packing` (EOS-separated blocks),
`producer` (transactional, ledger-backed idempotent produce). Consumer side: `loader`,
`assignment`, `state`. Import the submodules directly; this package imports nothing heavy.
"""
