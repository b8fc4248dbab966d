"""The producer's refusals: a ledger entry that does not match the batch about to be produced.

Each raises LedgerConflictError before anything is produced, naming the way out (the same content again, or
`pipeline-project ledger retire`).
"""

from __future__ import annotations

from typing import Any

from pipeline_project.streaming.errors import LedgerConflictError
from pipeline_project.streaming.ledger.retirements import Retirement


def check_record(record: Any, fingerprint: tuple, current_id: str, where: str, what: str) -> None:
    if record.fingerprint() != fingerprint:
        content, tok_hash, seq_len, packing = (*fingerprint, "")[:4]
        raise LedgerConflictError(
            f"{where} {what} content {record.content_hash} (tokenizer {record.tokenizer_hash[:12]}, seq_len "
            f"{record.seq_len}{_packing(getattr(record, 'packing_hash', ''))}) at offsets {record.offsets}; refusing "
            f"to add content {content} (tokenizer {tok_hash[:12]}, seq_len {seq_len}{_packing(packing)}) under the "
            "same key. Either give it that content again (the same "
            "input and cleaning config) to finish or reuse it, or retire the entry: pipeline-project ledger retire "
            f"{record.ledger_key} --reason TEXT"
        )
    if record.topic_id and record.topic_id != current_id:
        raise LedgerConflictError(
            f"{where} {what} blocks in topic id {record.topic_id}, but the topic now has id {current_id}: it was "
            "deleted and recreated, and those blocks are gone with it. Retire the entry (pipeline-project ledger "
            f"retire {record.ledger_key} --reason TEXT), or use a new ledger key, to produce the batch again"
        )


def _packing(packing_hash: str) -> str:
    return f", packing {packing_hash}" if packing_hash else ", no FIM"


def check_not_retired(retired: list[Retirement], fingerprint: tuple, where: str) -> None:
    """Refuse to produce again what a retirement names: the same content packed the same way (the same blocks).
    The same content packed otherwise (another tokenizer, length, FIM or rehydration weights) makes other blocks."""
    for r in retired:
        if r.fingerprint() == fingerprint:
            raise LedgerConflictError(
                f"{where}: content {fingerprint[0]} was retired from this key ({r.reason!r}, by {r.operator}) and "
                f"its {r.blocks} blocks at offsets {r.offsets} are still in the topic; producing the same blocks "
                "again would put them there twice. Clean changed input as a new batch"
            )


def check_same_writer(progress: Any, txid: str, where: str) -> None:
    """init_transactions fences only its own transactional id: resuming under another one leaves the earlier
    attempt's zombie free to commit its open transaction after this attempt read the ledger."""
    if progress.transactional_id and progress.transactional_id != txid:
        raise LedgerConflictError(
            f"{where} was partly produced under transactional id {progress.transactional_id!r}, this attempt's is "
            f"{txid!r} (transactional_id_prefix changed?): a zombie of the earlier attempt would not be fenced. "
            "Finish it with the earlier prefix, or retire the entry (pipeline-project ledger retire)"
        )


def refusal_for_content(records: Any, ledger_key: str, content_hash: str) -> str | None:
    """Why the producer would refuse `content_hash` under `ledger_key` given its ledger records (None: it would
    not): a completion or progress record of other content, or this content retired from the key. For cleaning,
    which must refuse before it publishes anything."""
    completed, progress = records.completed.get(ledger_key), records.progress.get(ledger_key)
    for r in records.retired.get(ledger_key, []):
        if r.content_hash == content_hash:
            return (
                f"content {content_hash[:12]} was retired from it ({r.reason!r}) and its {r.blocks} blocks are still "
                "in the topic"
            )
    entry = completed or progress
    if entry is None or entry.content_hash == content_hash:
        return None
    state = "already in the topic" if completed else f"partly produced ({entry.blocks} blocks committed)"
    return (
        f"it is {state} with content {entry.content_hash[:12]} at offsets {dict(entry.offsets)}; cleaning it again "
        f"gives other content ({content_hash[:12]}). Either clean it to that content again (the same input and "
        f"cleaning config) so token_blocks finishes or reuses it, or retire the entry: pipeline-project ledger "
        f"retire {ledger_key} --reason TEXT (its blocks stay in the topic)"
    )
