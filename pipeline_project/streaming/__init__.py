"""Token blocks on Kafka, plain Python (no Dagster).

Shared: `kafka_client` (settings, tuned clients, delivery tracking), `client_policy` (the settings
exactly-once rests on, and the overrides refused), `topics` (topic layout),
`kafka_stats` (librdkafka statistics), `format` (wire format), `errors` (every error subclasses
`StreamingError`). Producer side: `tokenizer` (offline DeepSeek fast tokenizer), `packing`
(EOS-separated blocks, padded tail), `prefetch` (texts read ahead in a thread), `staging` (blocks
staged into bounded chunks before any transaction), `transactions` (one batch's bounded
transactions), `producer` (exactly once per ledger key), `ledger` (the `<topic>.ledger` records
of what was produced, complete or in progress), `ledger_checks` (the producer's refusals),
`ledger_retire` and `retirements` (retiring an entry, and its audit log), `visibility` (wait for commit markers), `verify`
(read back what a report claims). Consumer side: `loader` (`loader_config`), with `preflight`
(topic id and cursors against the log start), `partition_reader`, `assembler`, `dead_letters`,
`assignment` and `state`. Import the submodules directly; this package imports nothing heavy.
"""
