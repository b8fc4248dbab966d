from pathlib import Path

import pytest

from pipeline_project.cleaning import CleaningConfig, Document

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def corpus() -> Path:
    assert CORPUS.is_dir(), f"test corpus missing at {CORPUS}"
    return CORPUS


@pytest.fixture(scope="session")
def config() -> CleaningConfig:
    return CleaningConfig()


def make_doc(text: str, doc_id: str = "d", lang: str = "en") -> Document:
    return Document(id=doc_id, text=text, source="test", meta={"lang": lang})


def prose(n_sentences: int = 12, seed: int = 0) -> str:
    """Clean English prose that passes every quality filter, different for each seed."""
    import random

    rng = random.Random(seed)
    nouns = [
        "river",
        "garden",
        "teacher",
        "window",
        "market",
        "village",
        "engine",
        "letter",
        "forest",
        "harbor",
        "painter",
        "kitchen",
        "station",
        "mountain",
        "library",
        "doctor",
        "bridge",
        "orchard",
        "captain",
        "museum",
    ]
    verbs = [
        "watched",
        "described",
        "repaired",
        "visited",
        "painted",
        "followed",
        "measured",
        "carried",
        "found",
        "opened",
    ]
    adjs = ["quiet", "ancient", "narrow", "bright", "distant", "gentle", "careful", "crowded", "simple", "famous"]
    lines = []
    for _ in range(n_sentences):
        s = (
            f"The {rng.choice(adjs)} {rng.choice(nouns)} {rng.choice(verbs)} the {rng.choice(nouns)} "
            f"and the {rng.choice(adjs)} {rng.choice(nouns)} that {rng.choice(verbs)} it with {rng.choice(nouns)}s."
        )
        lines.append(s)
    return "\n".join(" ".join(lines[i : i + 2]) for i in range(0, len(lines), 2))
