"""Token blocks on Kafka, plain Python (no Dagster).

Shared: `kafka_client` (settings, tuned clients, delivery tracking), `topics` (topic layout),
`kafka_stats` (librdkafka statistics), `format` (wire format), `errors` (every error subclasses
`StreamingError`). Producer side: `tokenizer` (offline DeepSeek fast tokenizer), `packing`
(EOS-separated blocks), `prefetch` (texts read ahead in a thread), `producer` (transactional,
idempotent produce per ledger key), `ledger` (the `<topic>.ledger` record of what was produced),
`verify` (read back what a report claims). Consumer side: `loader`, with `partition_reader`,
`assembler`, `assignment` and `state`. Import the submodules directly; this package imports
nothing heavy.
"""
