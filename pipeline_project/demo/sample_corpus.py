"""A generated sample corpus for the demo: several languages, duplicates, near-duplicates and junk.

The sentences are from public-domain works (Austen, Melville, Dickens, Carroll, Kafka, Grimm,
Hugo, Verne, the Analects, the Tao Te Ching). Documents are seeded recombinations of them, so the
output is identical for a seed and needs no network or data files.
"""

from __future__ import annotations

import gzip
import json
import random
from dataclasses import dataclass

import zstandard

EN = [
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is considered the rightful property of some one or other of their daughters.",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money in my purse, and nothing particular to interest me on shore, I thought I would sail about a little and see the watery part of the world.",
    "It is a way I have of driving off the spleen and regulating the circulation.",
    "Whenever I find myself growing grim about the mouth; whenever it is a damp, drizzly November in my soul, then I account it high time to get to sea as soon as I can.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity.",
    "There were a king with a large jaw and a queen with a plain face, on the throne of England; there were a king with a large jaw and a queen with a fair face, on the throne of France.",
    "Alice was beginning to get very tired of sitting by her sister on the bank, and of having nothing to do.",
    "Once or twice she had peeped into the book her sister was reading, but it had no pictures or conversations in it, and what is the use of a book, thought Alice, without pictures or conversations?",
    "So she was considering in her own mind, as well as she could, for the hot day made her feel very sleepy and stupid, whether the pleasure of making a daisy-chain would be worth the trouble of getting up and picking the daisies.",
    "The river wound slowly through the valley, and the mill on its bank had turned for three generations without a pause.",
    "He kept his accounts in a small brown book, and every evening he added the figures twice before he allowed himself to sleep.",
    "The harbour master had seen many ships come in under strange flags, but none had ever carried so quiet a crew.",
    "In the winter the roads were impassable, and the village lived on what it had stored in the autumn.",
    "Her letters arrived every second Tuesday, folded into thirds and sealed with green wax.",
    "The library held more maps than books, and most of the maps showed coasts that no longer existed.",
    "They argued about the weather, the price of grain and the new bridge, and then they went home and did nothing at all.",
    "A lamp was burning in the upper window long after the rest of the street had gone dark.",
    "The old captain said that the sea forgives nothing, but that it also remembers nothing, which is a kind of mercy.",
    "By noon the fog had lifted, and the whole bay lay open and bright beneath them.",
]
DE = [
    "Als Gregor Samsa eines Morgens aus unruhigen Träumen erwachte, fand er sich in seinem Bett zu einem ungeheueren Ungeziefer verwandelt.",
    "Er lag auf seinem panzerartig harten Rücken und sah, wenn er den Kopf ein wenig hob, seinen gewölbten, braunen, von bogenförmigen Versteifungen geteilten Bauch.",
    "Es war einmal eine kleine süße Dirne, die hatte jedermann lieb, der sie nur ansah, am allerliebsten aber ihre Großmutter.",
    "Vor einem großen Walde wohnte ein armer Holzhacker mit seiner Frau und seinen zwei Kindern.",
    "Der Winter war lang gewesen, und die Bauern warteten ungeduldig auf das erste warme Wetter des Frühlings.",
    "In der kleinen Stadt am Fluss kannte jeder jeden, und keine Nachricht blieb länger als einen Tag ein Geheimnis.",
    "Die Glocken der Kirche läuteten zur Mittagsstunde, und die Kinder liefen aus der Schule nach Hause.",
    "Am Abend saß die Familie um den großen Tisch, und der Großvater erzählte Geschichten aus alten Zeiten.",
]
FR = [
    "En 1815, M. Charles-François-Bienvenu Myriel était évêque de Digne. C'était un vieillard d'environ soixante-quinze ans.",
    "L'année 1866 fut marquée par un événement bizarre, un phénomène inexpliqué et inexplicable que personne n'a sans doute oublié.",
    "Le navire quitta le port au lever du jour, et les passagers regardèrent longtemps la côte disparaître à l'horizon.",
    "Dans ce petit village de montagne, les hivers étaient longs et les soirées se passaient au coin du feu.",
    "Le vieux marchand comptait ses pièces avec soin, puis il fermait sa boutique et rentrait chez lui par la rue étroite.",
    "La pluie tombait depuis trois jours, et la rivière avait envahi les prés jusqu'au pied de la colline.",
    "Elle écrivait chaque soir dans un carnet noir, et personne ne savait ce qu'elle y notait.",
    "Les enfants jouaient sur la place pendant que les anciens discutaient du prix du blé.",
]
ZH = [
    "子曰：学而时习之，不亦说乎？有朋自远方来，不亦乐乎？人不知而不愠，不亦君子乎？",
    "道可道，非常道；名可名，非常名。无名天地之始，有名万物之母。",
    "人之初，性本善。性相近，习相远。苟不教，性乃迁。",
    "曾子曰：吾日三省吾身：为人谋而不忠乎？与朋友交而不信乎？传不习乎？",
    "天下皆知美之为美，斯恶已；皆知善之为善，斯不善已。",
    "子曰：温故而知新，可以为师矣。",
    "春天来了，山上的树都绿了，河里的水也慢慢地暖和起来。",
    "这家小书店开在老街的拐角处，店主每天早上都会把新到的书摆在门口。",
    "村子里的人们在秋天收割稻谷，晚上聚在一起谈论今年的收成。",
    "他每天坚持读书写字，几十年来从未间断。",
]
JUNK = [
    "Home | About | Contact | Login | Register | Cart (0)",
    "Click here!!! $$$ BUY NOW $$$ !!! http://example.invalid/buy",
    "lorem ipsum dolor sit amet",
    "Cookie settings Accept all Reject all Privacy policy Terms of use",
]


@dataclass(frozen=True)
class SampleFile:
    key: str
    data: bytes


def _doc(rng: random.Random, pool: list[str], n: int, sep: str = " ") -> str:
    paras = []
    for _ in range(max(1, n // 4)):
        paras.append(sep.join(rng.sample(pool, k=min(len(pool), 4))))
    return "\n\n".join(paras)


def _near_duplicate(rng: random.Random, text: str, edit_rate: float = 0.03) -> str:
    words = text.split(" ")
    for i in range(len(words)):
        if rng.random() < edit_rate:
            words[i] = words[i].upper() if rng.random() < 0.5 else words[i] + ","
    return " ".join(words)


def _jsonl(docs: list[str], start: int = 0) -> bytes:
    return "".join(json.dumps({"id": f"d{start + i}", "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(docs)).encode()


def generate(seed: int = 0, docs_per_language: int = 60) -> list[SampleFile]:
    """Files under `raw/` as the demo uploads them: mixed formats, languages, duplicates and junk."""
    rng = random.Random(seed)
    en = [_doc(rng, EN, 16) for _ in range(docs_per_language * 2)]
    de = [_doc(rng, DE, 12) for _ in range(docs_per_language)]
    fr = [_doc(rng, FR, 12) for _ in range(docs_per_language)]
    zh = [_doc(rng, ZH, 12, sep="") for _ in range(docs_per_language)]
    dupes = [rng.choice(en) for _ in range(8)] + [rng.choice(zh) for _ in range(4)]
    near = [_near_duplicate(rng, rng.choice(en)) for _ in range(8)]
    pii = [
        en[0] + "\n\nContact me at jane.doe@example.com or +1 (415) 555-0132, server 203.0.113.7.",
    ]
    junk = JUNK + ["\n".join(["Subscribe to our newsletter"] * 30), "ok", "!!!!!!!!!!!!!!!!!!!!"]

    files = [
        SampleFile("raw/sample/en/books.jsonl", _jsonl(en[: docs_per_language])),
        SampleFile("raw/sample/en/more_books.jsonl.zst", zstandard.ZstdCompressor().compress(_jsonl(en[docs_per_language:], 1000))),
        SampleFile("raw/sample/de/maerchen.json.gz", gzip.compress(_jsonl(de, 2000))),
        SampleFile("raw/sample/fr/romans.jsonl", _jsonl(fr, 3000)),
        SampleFile("raw/sample/zh/classics.jsonl", _jsonl(zh, 4000)),
        SampleFile("raw/sample/mixed/duplicates.jsonl", _jsonl(dupes + near + pii, 5000)),
        SampleFile("raw/sample/mixed/junk.jsonl", _jsonl(junk, 6000)),
        SampleFile("raw/sample/mixed/bad_lines.jsonl", _jsonl(en[:2], 7000) + b'{"text": "unterminated\n' + b"not json at all\n"),
        SampleFile("raw/sample/txt/letter_latin1.txt", ("Une lettre écrite à Genève. " + " ".join(FR[:4])).encode("latin-1", "replace")),
        SampleFile("raw/sample/txt/essay.txt.gz", gzip.compress(_doc(rng, EN, 16).encode())),
        SampleFile("raw/sample/txt/truncated.txt.gz", gzip.compress(_doc(rng, EN, 16).encode())[:60]),
    ]
    for i in range(3):
        files.append(SampleFile(f"raw/sample/txt/story_{i}.txt", _doc(rng, EN, 12).encode()))
    return files


def describe(files: list[SampleFile]) -> str:
    total = sum(len(f.data) for f in files)
    return f"{len(files)} files, {total / 1e3:.0f} kB"


def write_to_dir(files: list[SampleFile], root) -> None:
    from pathlib import Path

    for f in files:
        p = Path(root) / f.key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f.data)


