"""Code and book-like documents for the generated sample: inputs of the code and books cleaning profiles."""

from __future__ import annotations

import random

CODE_NOUNS = ["order", "invoice", "sensor", "reading", "shipment", "account", "record", "session", "ticket", "batch"]
CODE_VERBS = ["load", "parse", "merge", "validate", "summarize", "normalize", "group", "export"]


def code_file(rng: random.Random, i: int) -> tuple[str, str]:
    """(path, source) of a small, plausible Python module: the code profile's input."""
    noun, verb = rng.choice(CODE_NOUNS), rng.choice(CODE_VERBS)
    other = rng.choice([n for n in CODE_NOUNS if n != noun])
    limit = rng.randint(3, 500)
    source = f'''"""Helpers to {verb} {noun} data before it is stored."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass
class {noun.title()}:
    key: str
    amount: float
    {other}_id: int | None = None

    def is_valid(self) -> bool:
        return bool(self.key) and self.amount >= 0


def {verb}_{noun}s(path: Path, limit: int = {limit}) -> list[{noun.title()}]:
    """Read at most `limit` {noun}s from a JSON lines file, skipping the invalid ones."""
    items = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            raw = json.loads(line)
            item = {noun.title()}(key=raw["key"], amount=float(raw.get("amount", 0)))
            if item.is_valid():
                items.append(item)
            if len(items) >= limit:
                break
    return items


def total_by_{other}(items: list[{noun.title()}]) -> dict[int | None, float]:
    totals: dict[int | None, float] = {{}}
    for item in items:
        totals[item.{other}_id] = totals.get(item.{other}_id, 0.0) + item.amount
    return totals
'''
    return f"src/{noun}_{verb}_{i}.py", source


BOOK_WORDS = {
    "adj": [
        "quiet",
        "old",
        "narrow",
        "grey",
        "patient",
        "distant",
        "bright",
        "tired",
        "careful",
        "sudden",
        "humble",
        "restless",
        "silver",
        "broken",
        "gentle",
        "heavy",
        "crooked",
        "hollow",
        "solemn",
        "eager",
        "faded",
        "bitter",
        "frozen",
        "golden",
        "muddy",
        "ragged",
        "slender",
        "stubborn",
        "wary",
    ],
    "noun": [
        "keeper",
        "harbour",
        "lantern",
        "widow",
        "fisherman",
        "captain",
        "daughter",
        "storm",
        "ledger",
        "chapel",
        "orchard",
        "miller",
        "traveller",
        "schoolmaster",
        "ferry",
        "cottage",
        "sailor",
        "parson",
        "granary",
        "shepherd",
        "clockmaker",
        "blacksmith",
        "lighthouse",
        "meadow",
        "mill",
        "inn",
        "bridge",
        "quarry",
        "vicar",
    ],
    "verb": [
        "watched",
        "followed",
        "remembered",
        "mended",
        "carried",
        "answered",
        "counted",
        "crossed",
        "opened",
        "described",
        "visited",
        "doubted",
        "praised",
        "avoided",
        "greeted",
        "questioned",
        "painted",
        "repaired",
        "studied",
        "trusted",
    ],
}


def _chapter(rng: random.Random, sentences: int = 40) -> str:
    w = BOOK_WORDS
    templates = [
        "The {a1} {n1} {v1} the {a2} {n2} in {year}.",
        "{N1} and {n2} {v1} {a1} letters while the {n3} {v2} nothing.",
        "Nobody {v1} a {a1} {n1}; {n2}s were {a2} then, {year} or so.",
        "When the {n1} {v1} her, {a1} {n2}s {v2} {a2} {n3}s.",
        "{year}: {a1} {n1}, {a2} {n2}, one {n3} {v1}.",
    ]
    out = []
    for _ in range(sentences):
        n1, n2, n3 = rng.sample(w["noun"], 3)
        a1, a2 = rng.sample(w["adj"], 2)
        v1, v2 = rng.sample(w["verb"], 2)
        year = str(rng.randint(1790, 1899))
        out.append(
            rng.choice(templates).format(n1=n1, N1=n1.title(), n2=n2, n3=n3, a1=a1, a2=a2, v1=v1, v2=v2, year=year)
        )
    return " ".join(out[:20]) + "\n\n" + " ".join(out[20:])


def book(rng: random.Random, chapters: int = 12) -> str:
    """A long-form text with a Project Gutenberg header and footer: the books profile's input."""
    title = rng.choice(["The Lighthouse Keeper", "A Winter in the Valley", "Letters from the Coast"])
    body = "\n\n".join(f"CHAPTER {c + 1}\n\n" + _chapter(rng) for c in range(chapters))
    return (
        f"The Project Gutenberg eBook of {title}\n\nThis eBook is for the use of anyone anywhere.\n\n"
        f"*** START OF THE PROJECT GUTENBERG EBOOK {title.upper()} ***\n\n{body}\n\n"
        f"*** END OF THE PROJECT GUTENBERG EBOOK {title.upper()} ***\n"
    )
