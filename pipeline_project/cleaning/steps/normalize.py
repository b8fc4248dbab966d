"""Steps that repair text rather than judge it."""

from __future__ import annotations

import re

import ftfy

from pipeline_project.cleaning.config import BoilerplateConfig, EncodingRepairConfig
from pipeline_project.cleaning.steps.base import DocFilter

_MAYBE_BROKEN = re.compile(r"[^\t\n\x20-\x25\x27-\x7e\u3001-\u303f\u4e00-\u9fff\uff01-\uff5e]")
_LINE = re.compile(r"[^\n]*\n|[^\n]+")


class EncodingRepair(DocFilter):
    """ftfy with DataTrove's FTFYFormatter settings (no NFKC, no uncurling, no width change)."""

    name = "encoding_repair"

    def __init__(self, cfg: EncodingRepairConfig):
        self.fix_line_breaks = cfg.fix_line_breaks
        self.fixer = ftfy.TextFixerConfig(
            unescape_html=cfg.unescape_html,
            remove_terminal_escapes=True,
            fix_encoding=True,
            restore_byte_a0=True,
            replace_lossy_sequences=True,
            decode_inconsistent_utf8=True,
            fix_c1_controls=True,
            fix_latin_ligatures=False,
            fix_character_width=False,
            uncurl_quotes=False,
            fix_line_breaks=cfg.fix_line_breaks,
            fix_surrogates=True,
            remove_control_chars=cfg.remove_control_chars,
            normalization=None,
        )

    def fix(self, text: str) -> str:
        """ftfy works line by line and cannot change a line of printable ASCII (no "&", no ESC) or plain
        CJK, so only the other lines go through it; the result equals ftfy.fix_text on the whole text."""
        if self.fix_line_breaks:
            text = text.replace("\r\n", "\n")
        if not _MAYBE_BROKEN.search(text):
            return text
        out, run = [], []
        for line in _LINE.findall(text):
            if _MAYBE_BROKEN.search(line):
                run.append(line)
                continue
            if run:
                out.append(ftfy.fix_text("".join(run), config=self.fixer))
                run = []
            out.append(line)
        if run:
            out.append(ftfy.fix_text("".join(run), config=self.fixer))
        return "".join(out)

    def check(self, doc):
        fixed = self.fix(doc.text).replace("\x00", "")
        if fixed != doc.text:
            doc.text = fixed
        return None


class NonEmpty(DocFilter):
    name = "non_empty"

    def check(self, doc):
        return "empty" if not doc.text.strip() else None


_PG_START = re.compile(r"^\*{3} ?START OF (?:THE|THIS) PROJECT GUTENBERG EBOOK.*$", re.I | re.M)
_PG_END = re.compile(
    r"^(?:\*{3} ?END OF (?:THE|THIS) PROJECT GUTENBERG EBOOK.*|End of (?:the )?Project Gutenberg'?s? .*)$", re.I | re.M
)


# the pre-2003 header ends with this line ("*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*")
_PG_SMALL_PRINT_END = re.compile(r"^\*END\*? ?THE SMALL PRINT!.*$", re.I | re.M)


class BoilerplateStrip(DocFilter):
    """Cut the Project Gutenberg header and license footer at the standard START/END markers.

    With `small_print` (the books profile), a text without a START marker is cut after the old-style
    header's "*END*THE SMALL PRINT!" line when that line is in the first half of the text."""

    name = "boilerplate_strip"

    def __init__(self, cfg: BoilerplateConfig, small_print: bool = False):
        self.cfg = cfg
        self.small_print = small_print

    def check(self, doc):
        if not self.cfg.gutenberg or "PROJECT GUTENBERG" not in doc.text.upper()[:20000]:
            return None
        text = doc.text
        start = _PG_START.search(text)
        if start:
            text = text[start.end() :]
        elif self.small_print:
            old = _PG_SMALL_PRINT_END.search(text, 0, len(text) // 2)
            if old:
                text = text[old.end() :]
        end = _PG_END.search(text)
        if end:
            text = text[: end.start()]
        text = text.strip()
        if text != doc.text:
            doc.text = text
            doc.meta["boilerplate_stripped"] = "gutenberg"
        return None
