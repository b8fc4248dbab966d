"""Adversarial inputs take time linear in their size in every pattern of the cleaning chain: the time for 4x the
input stays near 4x (a quadratic pattern takes 16x), and normal input is decided as before."""

from __future__ import annotations

import re
import time

import pytest

from pipeline_project.cleaning import Document
from pipeline_project.cleaning.config import PIIConfig
from pipeline_project.cleaning.config.profiles import CodeFilterConfig, SecretsConfig
from pipeline_project.cleaning.steps.code import CodeQuality, SecretsMasking, visible_text
from pipeline_project.cleaning.steps.pii import mask_pii
from pipeline_project.cleaning.steps.text import split_words
from pipeline_project_tests.cleaning.conftest import prose

KB = 1024
CODE = CodeQuality(CodeFilterConfig(), ("path",))
SECRETS = SecretsMasking(SecretsConfig(), PIIConfig())


def _html_check(text: str):
    return CODE.check(Document("p", text, "code/site/page.html", {"lang": "html"}))


def _seconds(run, text: str) -> float:
    best = float("inf")
    for _ in range(2):
        start = time.process_time()
        run(text)
        best = min(best, time.process_time() - start)
    return best


# (name, the work, a unit the input repeats, small size in characters); the large size is 4x
CASES = [
    ("unclosed_script_short_lines", _html_check, "<script>" * 8 + "\n", 256 * KB),
    ("unclosed_style", _html_check, "<style a=b>x" * 6 + "\n", 256 * KB),
    ("unclosed_tags", visible_text, "<a", 256 * KB),
    ("unclosed_comments", visible_text, "<!--", 256 * KB),
    ("open_parens_word", lambda t: split_words(t, "en"), "(", 64 * KB),
    ("dots_then_letter", lambda t: split_words("a" + t + "x", "en"), ".", 64 * KB),
    ("quotes_word", lambda t: split_words(t + "a" + t, "en"), '"', 64 * KB),
    ("secret_names_run", SECRETS.mask, "password", 256 * KB),
    ("unclosed_private_keys", SECRETS.mask, "-----BEGIN RSA PRIVATE KEY-----\n", 256 * KB),
    ("phone_like_digits", lambda t: mask_pii(t, PIIConfig()), "+" + "1" * 30 + " ", 64 * KB),
    ("email_like_domain", lambda t: mask_pii("a@" + t, PIIConfig()), "b.", 256 * KB),
    ("dotted_numbers", lambda t: mask_pii(t, PIIConfig()), "1.", 256 * KB),
]


@pytest.mark.parametrize(("name", "run", "unit", "size"), CASES, ids=[c[0] for c in CASES])
def test_adversarial_input_takes_linear_time(name, run, unit, size):
    small, large = (unit * (n // len(unit)) for n in (size, 4 * size))
    if run is _html_check:  # the 1 MB file reaches the HTML rule (no earlier rule drops it)
        assert run(large) == "html_visible_text"
    ratio = _seconds(run, large) / max(_seconds(run, small), 0.005)
    assert ratio < 8, f"{name}: 4x the input took {ratio:.1f}x the time"


def _old_visible_text(text: str) -> str:
    """The regex the HTML rule used before (quadratic on unclosed tags); a reference for normal pages."""
    script_style = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.I | re.S)
    text = re.sub(r"<[^>]*>", " ", script_style.sub(" ", text))
    return re.sub(r"\s+", " ", text).strip()


def _pages() -> list[str]:
    head = '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>Notes</title>\n'
    script = "<script>\nvar n = 1;\nfunction f(a, b) { return a < b ? a : b; }\n</script>\n"
    style = '<style type="text/css">\nbody { margin: 0 }\np { color: #333 }\n</style>\n'
    pages = []
    for i in range(12):
        body = "\n".join(f"<p>{prose(2 + i % 5, seed=i * 10 + k)}</p>" for k in range(1 + i % 4))
        scripts = (script * (i * 3)) + style * (i % 3)
        pages.append(f"{head}{scripts}</head>\n<body>\n<div class='main'>\n{body}\n</div>\n</body>\n</html>\n")
    pages.append(f"{head}{script * 40}</head><body><nav><a href='/'>Home</a></nav></body></html>")
    pages.append("<html><body><ul>" + "".join(f"<li><a href='/{k}'>item {k}</a></li>" for k in range(30)) + "</ul>")
    return pages


def test_normal_pages_are_kept_and_dropped_as_before():
    verdicts = []
    for page in _pages():
        old = _old_visible_text(page)
        cfg = CODE.cfg
        old_verdict = (
            "html_visible_text"
            if len(old) < cfg.html_min_visible_chars or len(old) < cfg.html_min_visible_fraction * len(page)
            else None
        )
        assert CODE._language_rules("html", "page.html", page, page.splitlines()) == old_verdict
        assert abs(len(visible_text(page)) - len(old)) <= 0.02 * len(old) + 2
        verdicts.append(old_verdict)
    assert None in verdicts and "html_visible_text" in verdicts  # both outcomes are covered


def test_visible_text_leaves_out_scripts_styles_and_comments():
    page = "<p>Hello &amp; <b>world</b></p><script>var a = '<p>no</p>';</script><!-- hidden --><style>p{}</style> end"
    assert visible_text(page) == "Hello & world end"
    assert visible_text("<p>open <script>\nhidden\n") == "open"  # as a browser shows an unclosed script
    assert visible_text("") == "" and visible_text('<?xml version="1.0" encoding="utf-8"?><p>x</p>') == "x"
