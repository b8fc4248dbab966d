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

from pipeline_project.demo.sample.domains import book, code_file

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


# Small grammars: each language's documents are sentences drawn from templates, so documents differ
# the way real ones do (few shared 5-grams) while reading as prose. One quoted sentence from the
# public-domain pool above opens each document.
GRAMMAR = {
    "en": {
        "templates": [
            "{name} {verb} the {adj} {noun} near the {place} {time}.",
            "In the {place}, the {noun} was {adj}, and {name} {verb} it with {care}.",
            "Nobody in the {place} had seen a {adj} {noun} since {name} {verb} one {time}.",
            "{time_cap}, {name} wrote that the {noun} of the {place} was {adj} and {adj2}.",
            "The {noun} {verb2} slowly while {name} waited by the {place}.",
            "It was {adj} to think that the {noun} had been there for {num} years.",
            "When the bells rang {time}, {name} hurried past the {place} without looking back.",
            "Some said the {noun} belonged to a family from the {place}; others laughed at the idea.",
            "{name} asked whether anyone remembered who {verb} the {noun}, but no one answered.",
            "There were {num} of them on the road to the {place}, and every one was {adj2}.",
            "By evening a {adj} light lay over the {place}, and {name} could hear the {noun} creak.",
            "Whatever the reason, the {noun} stayed {adj}, much to the annoyance of {name}.",
            "Letters from the {place} arrived {time}, each one shorter than the last.",
            "{name} kept a {adj} notebook in which every {noun} of the district was listed.",
        ],
        "name": [
            "Margaret",
            "the old captain",
            "Thomas",
            "her brother",
            "the miller",
            "Eleanor",
            "the clerk",
            "Mr. Hale",
            "the doctor",
            "young Edward",
            "the widow",
            "Samuel",
            "the schoolmaster",
            "Anne",
        ],
        "verb": [
            "found",
            "carried",
            "painted",
            "mended",
            "described",
            "remembered",
            "sold",
            "watched",
            "measured",
            "counted",
            "buried",
            "opened",
        ],
        "verb2": ["turned", "settled", "drifted", "burned", "faded", "changed", "rose", "grew"],
        "adj": [
            "quiet",
            "broken",
            "ancient",
            "narrow",
            "bright",
            "heavy",
            "curious",
            "forgotten",
            "silver",
            "crooked",
            "gentle",
            "restless",
            "distant",
            "patient",
        ],
        "adj2": ["cold", "strange", "beautiful", "useless", "dangerous", "familiar", "wonderful", "dark"],
        "noun": [
            "bridge",
            "lantern",
            "orchard",
            "letter",
            "clock",
            "boat",
            "garden",
            "map",
            "bell",
            "road",
            "window",
            "chapel",
            "harbour",
            "ledger",
            "piano",
            "mill",
        ],
        "place": [
            "river",
            "market",
            "station",
            "churchyard",
            "coast",
            "valley",
            "square",
            "library",
            "farm",
            "lighthouse",
            "inn",
            "hill",
        ],
        "time": [
            "last winter",
            "before dawn",
            "every Sunday",
            "in the spring",
            "after the storm",
            "at midnight",
            "during the war",
            "the following morning",
        ],
        "care": ["great care", "some impatience", "a steady hand", "quiet pride", "no help at all"],
    },
    "de": {
        "templates": [
            "{name} {verb} den {adj} {noun} am {place} {time}.",
            "Am {place} war der {noun} {adj}, und {name} {verb} ihn mit {care}.",
            "Seit {num} Jahren hatte niemand am {place} einen so {adj} {noun} gesehen.",
            "{time_cap} schrieb {name}, dass der {noun} am {place} {adj} und {adj2} sei.",
            "Als die Glocken {time} läuteten, eilte {name} ohne ein Wort am {place} vorbei.",
            "Manche meinten, der {noun} gehöre einer Familie vom {place}, andere lachten darüber.",
            "Es waren {num} Leute auf dem Weg zum {place}, und keiner von ihnen war {adj2}.",
            "Am Abend lag ein {adj} Licht über dem {place}, und {name} hörte den {noun} knarren.",
        ],
        "name": [
            "der alte Müller",
            "Gretel",
            "der Lehrer",
            "Frau Berger",
            "der Kapitän",
            "Johann",
            "die Witwe",
            "der Förster",
            "Anna",
            "der Schreiber",
        ],
        "verb": ["fand", "trug", "malte", "reparierte", "beschrieb", "verkaufte", "beobachtete", "zählte"],
        "adj": ["stillen", "alten", "schmalen", "hellen", "schweren", "seltsamen", "vergessenen", "krummen"],
        "adj2": ["kalt", "fremd", "schön", "nutzlos", "gefährlich", "vertraut", "dunkel"],
        "noun": ["Brunnen", "Wagen", "Garten", "Brief", "Turm", "Weg", "Schrank", "Stein", "Zaun", "Ofen"],
        "place": ["Fluss", "Markt", "Bahnhof", "Waldrand", "Hafen", "Berg", "Dorfplatz", "See"],
        "time": [
            "im letzten Winter",
            "vor Sonnenaufgang",
            "jeden Sonntag",
            "im Frühling",
            "nach dem Sturm",
            "um Mitternacht",
        ],
        "care": ["großer Sorgfalt", "wenig Geduld", "ruhiger Hand", "stillem Stolz"],
    },
    "fr": {
        "templates": [
            "{name} {verb} le {noun} {adj} près du {place} {time}.",
            "Au bord du {place}, le {noun} était {adj}, et {name} le {verb} avec {care}.",
            "Depuis {num} ans, personne au {place} n'avait vu un {noun} aussi {adj}.",
            "{time_cap}, {name} écrivit que le {noun} du {place} était {adj} et {adj2}.",
            "Quand les cloches sonnèrent {time}, {name} passa devant le {place} sans se retourner.",
            "Certains disaient que le {noun} appartenait à une famille du {place}, d'autres en riaient.",
            "Ils étaient {num} sur la route du {place}, et aucun d'eux n'était {adj2}.",
            "Le soir, une lumière {adj} tombait sur le {place}, et {name} entendait grincer le {noun}.",
        ],
        "name": [
            "le vieux meunier",
            "Madeleine",
            "l'instituteur",
            "Madame Roche",
            "le capitaine",
            "Julien",
            "la veuve",
            "le notaire",
            "Claire",
            "le forgeron",
        ],
        "verb": ["trouva", "porta", "peignit", "répara", "décrivit", "vendit", "observa", "compta"],
        "adj": ["tranquille", "ancien", "étroit", "lumineux", "lourd", "curieux", "oublié", "tordu"],
        "adj2": ["froid", "étrange", "beau", "inutile", "dangereux", "familier", "sombre"],
        "noun": ["pont", "jardin", "moulin", "registre", "clocher", "chemin", "bateau", "puits", "mur", "four"],
        "place": ["fleuve", "marché", "port", "village", "canal", "bois", "lac", "quai"],
        "time": ["l'hiver dernier", "avant l'aube", "chaque dimanche", "au printemps", "après l'orage", "à minuit"],
        "care": ["un grand soin", "peu de patience", "une main sûre", "une fierté tranquille"],
    },
    "zh": {
        "templates": [
            "{time}，{name}在{place}{verb}了一座{adj}的{noun}。",
            "{place}的{noun}很{adj}，{name}用了{num}天才把它{verb}好。",
            "{name}说，{place}已经有{num}年没有见过这样{adj}的{noun}了。",
            "{time}，{name}写信告诉家人，{place}的{noun}又{adj}又{adj2}。",
            "钟声响起的时候，{name}匆匆走过{place}，没有回头。",
            "有人说那{noun}属于{place}的一户人家，也有人觉得这是笑话。",
            "去{place}的路上一共有{num}个人，谁也不觉得{adj2}。",
            "傍晚，{place}笼罩在{adj}的光里，{name}听见{noun}吱吱作响。",
        ],
        "name": ["老船长", "村里的教书先生", "王大娘", "年轻的磨坊主", "李先生", "她的哥哥", "镇上的医生", "小明"],
        "verb": ["修", "画", "找到", "卖掉", "看守", "记录", "搬走", "清理"],
        "adj": ["古老", "安静", "狭窄", "明亮", "沉重", "奇怪", "破旧", "漂亮"],
        "adj2": ["寒冷", "陌生", "危险", "熟悉", "黑暗", "美丽"],
        "noun": ["石桥", "灯塔", "果园", "钟楼", "木船", "花园", "水井", "书架", "磨坊"],
        "place": ["河边", "集市", "车站", "山脚下", "海边", "村口", "湖畔", "城里"],
        "time": ["去年冬天", "天亮以前", "每个星期天", "春天的时候", "暴风雨过后", "半夜里"],
    },
}
QUOTES = {"en": EN, "de": DE, "fr": FR, "zh": ZH}


def _sentence(rng: random.Random, lang: str) -> str:
    g = GRAMMAR[lang]
    fields = {k: rng.choice(v) for k, v in g.items() if k != "templates"}
    fields["num"] = str(rng.randint(2, 90))
    fields["time_cap"] = fields["time"][:1].upper() + fields["time"][1:]
    fields.setdefault("adj2", fields["adj"])
    fields.setdefault("care", "")
    sentence = rng.choice(g["templates"]).format(**fields)
    return sentence[:1].upper() + sentence[1:]


def prose_document(rng: random.Random, lang: str, paragraphs: int = 4) -> str:
    sep = "" if lang == "zh" else " "
    paras = []
    for i in range(paragraphs):
        sentences = [_sentence(rng, lang) for _ in range(rng.randint(3, 6))]
        if i == 0:
            sentences.insert(0, rng.choice(QUOTES[lang]))
        paras.append(sep.join(sentences))
    return "\n\n".join(paras)


def _near_duplicate(rng: random.Random, text: str, edit_rate: float = 0.03) -> str:
    words = text.split(" ")
    for i in range(len(words)):
        if rng.random() < edit_rate:
            words[i] = words[i].upper() if rng.random() < 0.5 else words[i] + ","
    return " ".join(words)


def _jsonl(docs: list[str], start: int = 0) -> bytes:
    return "".join(
        json.dumps({"id": f"d{start + i}", "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(docs)
    ).encode()


def generate(seed: int = 0, docs_per_language: int = 150) -> list[SampleFile]:
    """Files under `raw/` as the demo uploads them: mixed formats, languages (Chinese too), code, a book,
    duplicates and junk."""
    rng = random.Random(seed)
    en = [prose_document(rng, "en", rng.randint(2, 4)) for _ in range(docs_per_language * 2)]
    de = [prose_document(rng, "de", 2) for _ in range(docs_per_language)]
    fr = [prose_document(rng, "fr", 2) for _ in range(docs_per_language)]
    zh = [prose_document(rng, "zh", 3) for _ in range(docs_per_language)]
    dupes = [rng.choice(en) for _ in range(8)] + [rng.choice(zh) for _ in range(4)]
    near = [_near_duplicate(rng, rng.choice(en)) for _ in range(8)]
    pii = [
        en[0] + "\n\nContact me at jane.doe@example.com or +1 (415) 555-0132, server 203.0.113.7.",
    ]
    junk = JUNK + ["\n".join(["Subscribe to our newsletter"] * 30), "ok", "!!!!!!!!!!!!!!!!!!!!"]

    files = [
        SampleFile("raw/sample/en/books.jsonl", _jsonl(en[:docs_per_language])),
        SampleFile(
            "raw/sample/en/more_books.jsonl.zst",
            zstandard.ZstdCompressor().compress(_jsonl(en[docs_per_language:], 1000)),
        ),
        SampleFile("raw/sample/de/maerchen.json.gz", gzip.compress(_jsonl(de, 2000))),
        SampleFile("raw/sample/fr/romans.jsonl", _jsonl(fr, 3000)),
        SampleFile("raw/sample/zh/classics.jsonl", _jsonl(zh, 4000)),
        SampleFile("raw/sample/mixed/duplicates.jsonl", _jsonl(dupes + near + pii, 5000)),
        SampleFile("raw/sample/mixed/junk.jsonl", _jsonl(junk, 6000)),
        SampleFile(
            "raw/sample/mixed/bad_lines.jsonl",
            _jsonl(en[:2], 7000) + b'{"text": "unterminated\n' + b"not json at all\n",
        ),
        SampleFile(
            "raw/sample/txt/letter_latin1.txt",
            ("Une lettre écrite à Genève. " + " ".join(FR[:4])).encode("latin-1", "replace"),
        ),
        SampleFile("raw/sample/txt/essay.txt.gz", gzip.compress(prose_document(rng, "en").encode())),
        SampleFile("raw/sample/txt/truncated.txt.gz", gzip.compress(prose_document(rng, "en").encode())[:60]),
    ]
    for i in range(3):
        files.append(SampleFile(f"raw/sample/txt/story_{i}.txt", prose_document(rng, "en").encode()))
    # drawn last, so the files above are the same for a seed as before these were added
    code = [code_file(rng, i) for i in range(max(2, docs_per_language // 10))]
    files.append(
        SampleFile(
            "raw/sample/code/modules.jsonl",
            "".join(json.dumps({"id": f"c{i}", "path": p, "text": t}) + "\n" for i, (p, t) in enumerate(code)).encode(),
        )
    )
    files.append(SampleFile("raw/sample/books/lighthouse_keeper.txt", book(rng).encode()))
    return files


def describe(files: list[SampleFile]) -> str:
    total = sum(len(f.data) for f in files)
    return f"{len(files)} files, {total / 1e3:.0f} kB"
