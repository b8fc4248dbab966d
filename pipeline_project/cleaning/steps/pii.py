"""Dolma-style PII masking: e-mails, public IPv4 addresses and phone numbers; too many hits drops the document."""

from __future__ import annotations

import ipaddress
import re

from pipeline_project.cleaning.config import PIIConfig
from pipeline_project.cleaning.steps.base import DocFilter, prepared

EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}(?![\w-])")
IPV4 = re.compile(
    r"(?<![\d.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\d.]*\d)"
)
PHONE = re.compile(
    r"(?<![\w+])(?:"
    r"(?:\+?1[-. ]?)?\(?\d{3}\)?[-. ]?\d{3}[-. ]\d{4}"  # North American: (555) 123-4567, 555.123.4567
    r"|\+\d{1,3}[-. ]?\d{1,4}(?:[-. ]?\d{2,4}){2,4}"  # international with a leading +
    r")(?![\w])"
)


def _is_public(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_global
    except ValueError:
        return False


def mask_pii(text: str, cfg: PIIConfig) -> tuple[str, dict[str, int]]:
    """`text` with every e-mail, public IPv4 address and phone number that `cfg` enables masked, and the hits by kind.

    The one masking routine: the PII step, the exclusion sink and the readers' `meta.fields` all call it.
    """
    hits = {"email": 0, "ip": 0, "phone": 0}

    def sub(pattern, mask, kind, keep=lambda s: True):
        def repl(m):
            if not keep(m.group(0)):
                return m.group(0)
            hits[kind] += 1
            return mask

        return pattern.sub(repl, text)

    if cfg.emails and "@" in text:
        text = sub(EMAIL, cfg.email_mask, "email")
    if cfg.public_ips:
        text = sub(IPV4, cfg.ip_mask, "ip", _is_public)
    if cfg.phone_numbers:
        text = sub(PHONE, cfg.phone_mask, "phone")
    return text, hits


class PIIMasking(DocFilter):
    name = "pii"

    def __init__(self, cfg: PIIConfig):
        self.cfg = cfg

    def prepare(self, doc):
        return mask_pii(doc.text, self.cfg)

    def check(self, doc):
        masked, hits = prepared(self, doc, lambda: self.prepare(doc))
        total = sum(hits.values())
        if total > self.cfg.max_hits:
            return "too_many_pii"
        if total:
            doc.text = masked
            doc.meta["pii_masked"] = {k: v for k, v in hits.items() if v}
        return None
