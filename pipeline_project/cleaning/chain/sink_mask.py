"""The text the exclusion sink stores for a removed document: masked exactly as its profile masks kept text.

Kept text is masked by the last step of its profile's chain: `PIIMasking(config.pii)` for en_web, zh_web and
books, `SecretsMasking(config.profiles.code.secrets, config.pii)` for code (keys, tokens, assigned passwords and
e-mail addresses). A removed document gets the same step with the same config, whichever step removed it. A
record without a profile (a quarantine detail, a document removed before it was routed) gets every masking
step that is on, so the sink never holds in clear what some profile's shards would mask.
"""

from __future__ import annotations

from pipeline_project.cleaning.config import CleaningConfig
from pipeline_project.cleaning.steps.pii import mask_pii


def _code_masking(config: CleaningConfig):
    from pipeline_project.cleaning.chain.profiles import active_profiles
    from pipeline_project.cleaning.steps.code import SecretsMasking

    secrets = config.profiles.code.secrets
    if "code" not in active_profiles(config) or not secrets.enabled:
        return None
    return SecretsMasking(secrets, config.pii)


def sink_mask(text: str, config: CleaningConfig, domain: str | None) -> str:
    """`text` masked as the shards of profile `domain` mask it (every masking step that is on when None)."""
    code = _code_masking(config) if domain in ("code", None) else None
    if code is not None:
        text = code.mask(text)[0]
    if config.pii.enabled and domain != "code":
        text = mask_pii(text, config.pii)[0]
    return text
