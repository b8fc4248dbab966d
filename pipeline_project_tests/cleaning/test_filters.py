"""Each rule on crafted documents on both sides of its threshold."""

from pipeline_project.cleaning import CleaningConfig
from pipeline_project.cleaning.config import (
    C4Config,
    FineWebConfig,
    GopherQualityConfig,
    GopherRepetitionConfig,
    PIIConfig,
)
from pipeline_project.cleaning.steps import (
    BoilerplateStrip,
    C4Quality,
    EncodingRepair,
    FineWebQuality,
    GopherQuality,
    GopherRepetition,
    LanguageID,
    PIIMasking,
)
from pipeline_project.cleaning.steps.text import TERMINAL_PUNCTUATION, split_words

from .conftest import make_doc, prose

# disable every Gopher quality rule except the one a test exercises
_OFF = dict(
    min_doc_words=None,
    max_doc_words=None,
    min_avg_word_length=None,
    max_avg_word_length=None,
    max_symbol_word_ratio=None,
    max_bullet_lines_ratio=None,
    max_ellipsis_lines_ratio=None,
    max_non_alpha_words_ratio=None,
    min_stop_words=None,
)


def gq(**on):
    return GopherQuality(GopherQualityConfig(**{**_OFF, **on}))


def test_clean_prose_passes_every_filter(config):
    doc = make_doc(prose())
    for step in (
        GopherRepetition(config.gopher_repetition),
        GopherQuality(config.gopher_quality),
        C4Quality(config.c4),
        FineWebQuality(config.fineweb),
    ):
        assert step.check(doc) is None, step.name


def test_tokenizer_splits_like_spacy_english():
    assert split_words("Don't stop, it's well-known: U.S. costs $1,000.50... see http://a.b/c or x@y.org!") == [
        "Do",
        "n't",
        "stop",
        ",",
        "it",
        "'s",
        "well",
        "-",
        "known",
        ":",
        "U.S.",
        "costs",
        "$",
        "1,000.50",
        "...",
        "see",
        "http://a.b/c",
        "or",
        "x@y.org",
        "!",
    ]


def test_split_words_is_the_same_from_its_chunk_cache_and_the_cache_stays_bounded(monkeypatch):
    from pipeline_project.cleaning.steps import text

    def by_rules(t: str) -> list[str]:
        out: list[str] = []
        for chunk in t.split():
            text._split_chunk(chunk, out)
        return out

    sample = "Cannot stop, it's (well-known) CANNOT: U.S. costs $1,000.50... x@y.org! 好，可 e.g. fs::File"
    monkeypatch.setattr(text, "_CHUNK_TOKENS", {})
    monkeypatch.setattr(text, "_CHUNK_TOKENS_MAX", 4)
    cold = split_words(sample)
    assert cold == split_words(sample) == by_rules(sample)  # cold, then from the cache
    assert cold[:2] == ["Can", "not"]  # a plain 6-letter chunk still takes the rules
    assert len(text._CHUNK_TOKENS) <= 4
    monkeypatch.setattr(text, "_CJK_BLOCK_TOKENS", {})
    zh = "我们今天去公园散步。天气很好，我们今天去公园散步！Python 3.12 和 jieba_0.42 很好用…… 北京大学的学生"
    for _ in range(2):  # cold, then from the block cache
        assert text._cjk_tokens(zh) == text._jieba().lcut(zh)
    assert len(text._CJK_BLOCK_TOKENS) <= 4
    assert text.is_word("word") and text.is_word("3") and text.is_word("好，") and not text.is_word("...")
    assert not text.is_word("")


def test_pure_han_blocks_cut_by_jieba_rs_equal_jieba_over_the_shared_chinese_corpus(corpus):
    import json

    from pipeline_project.cleaning.steps import text

    jieba = text._jieba()
    blocks: set[str] = set()
    for path in sorted([*corpus.glob("zh_*/*.jsonl"), *corpus.glob("web_noisy/*.jsonl")]):
        for line in path.read_text(encoding="utf-8").split("\n"):
            doc = json.loads(line).get("text") or "" if line.strip() else ""
            blocks.update(b for b in jieba.re_han_default.split(doc) if text._PURE_HAN.fullmatch(b))
    assert len(blocks) > 50_000
    differ = [b for b in sorted(blocks) if text._cut_block(b) != tuple(jieba.lcut(b))]
    assert differ == []
    mixed = "就是801.11n的无线网卡"  # not pure Han: jieba itself cuts it ("801.11", "n"; jieba-rs keeps "801.11n")
    assert text._cut_block(mixed) == tuple(jieba.lcut(mixed))


def test_terminal_punctuation_is_every_sentence_terminal_of_unicode():
    import sys

    import regex

    terminal = regex.compile(r"\p{Sentence_Terminal}")
    every = {chr(c) for c in range(sys.maxunicode + 1) if terminal.match(chr(c))}
    assert set(TERMINAL_PUNCTUATION) == every
    assert {"。", "！", "？", ".", "!", "?"} <= every


def test_gopher_word_count_boundary():
    step = gq(min_doc_words=50, max_doc_words=100)
    assert step.check(make_doc("word " * 50)) is None
    assert step.check(make_doc("word " * 49 + ", . !")) == "gopher_short_doc"
    assert step.check(make_doc("word " * 101)) == "gopher_long_doc"


def test_gopher_average_word_length():
    step = gq(min_avg_word_length=3, max_avg_word_length=10)
    assert step.check(make_doc("abc " * 10)) is None
    assert step.check(make_doc("ab " * 10)) == "gopher_below_avg_threshold"
    assert step.check(make_doc("abcdefghijk " * 10)) == "gopher_above_avg_threshold"


def test_gopher_symbol_ratios():
    step = gq(max_symbol_word_ratio=0.1)
    # 20 tokens: 18 words + 2 "#" -> ratio 0.1 is allowed, 3 hashes is not
    assert step.check(make_doc("word " * 18 + "# #")) is None
    assert step.check(make_doc("word " * 17 + "# # #")) == "gopher_too_many_hashes"
    assert step.check(make_doc("word " * 17 + "... ... …")) == "gopher_too_many_ellipsis"


def test_gopher_bullets_and_end_ellipsis():
    bullets = gq(max_bullet_lines_ratio=0.9)
    assert bullets.check(make_doc("\n".join(["• item"] * 9 + ["plain"]))) is None
    assert bullets.check(make_doc("\n".join(["• item"] * 10 + ["- more"] * 9 + ["plain"]))) == "gopher_too_many_bullets"
    ell = gq(max_ellipsis_lines_ratio=0.3)
    assert ell.check(make_doc("\n".join(["and so..."] * 3 + ["done."] * 7))) is None
    assert ell.check(make_doc("\n".join(["and so…"] * 4 + ["done."] * 6))) == "gopher_too_many_end_ellipsis"


def test_gopher_alpha_and_stop_words():
    alpha = gq(max_non_alpha_words_ratio=0.8)
    assert alpha.check(make_doc("word " * 8 + "12 34")) is None
    assert alpha.check(make_doc("word " * 7 + "12 34 56")) == "gopher_below_alpha_threshold"
    stop = gq(min_stop_words=2)
    assert stop.check(make_doc("the cat and dog")) is None
    assert stop.check(make_doc("the cat the dog")) == "gopher_enough_stop_words"
    # a language without a stop-word list skips the rule; Chinese has its own
    assert stop.check(make_doc("kot i pies", lang="pl")) is None
    assert stop.check(make_doc("我的猫是黑色的", lang="zh")) is None


def test_gopher_repetition_lines_and_paragraphs():
    step = GopherRepetition(
        GopherRepetitionConfig(
            top_n_grams=(), dup_n_grams=(), dup_line_char_frac=None, dup_para_char_frac=None, dup_para_frac=None
        )
    )
    unique = [f"line {i} is different" for i in range(7)]
    assert step.check(make_doc("\n".join(unique + ["same"] * 4))) is None  # 3 dups of 10 lines = 0.3
    assert step.check(make_doc("\n".join(unique[:6] + ["same"] * 5))) == "dup_line_frac"
    para = GopherRepetition(GopherRepetitionConfig(top_n_grams=(), dup_n_grams=()))
    assert para.check(make_doc("\n\n".join(["a paragraph here"] * 3 + ["other one", "third"]))) == "dup_para_frac"


def test_gopher_repetition_ngrams():
    cfg = GopherRepetitionConfig(
        dup_line_frac=None, dup_para_frac=None, dup_line_char_frac=None, dup_para_char_frac=None
    )
    step = GopherRepetition(cfg)
    assert step.check(make_doc(prose(12))) is None
    assert step.check(make_doc("buy cheap shoes now " * 30)).startswith(("top_", "duplicated_"))
    only_dup = GopherRepetition(cfg.model_copy(update={"top_n_grams": ()}))
    text = prose(10, seed=1) + " " + " ".join(prose(10, seed=1).split()[:60])
    assert only_dup.check(make_doc(text)) == "duplicated_5_n_grams"
    assert GopherRepetition(cfg).check(make_doc("")) == "empty"


def test_gopher_greedy_count_matches_reference_definition():
    """The hashed scan must count what the string version counts, including the skip after a repeat."""
    import numpy as np

    from pipeline_project.cleaning.steps.gopher import GopherRepetition as G

    def reference(words, n):
        seen, rep, idx = set(), 0, 0
        while idx < len(words) - n + 1:
            g = "".join(words[idx : idx + n])
            if g in seen:
                rep += len(g)
                idx += n
            else:
                seen.add(g)
                idx += 1
        return rep

    import random

    rng = random.Random(3)
    for _ in range(30):
        words = [rng.choice(["a", "bb", "ccc", "dd", "e"]) for _ in range(rng.randrange(5, 80))]
        n = rng.choice([2, 3, 5])
        h = np.fromiter(map(hash, words), dtype=np.int64).view(np.uint64)
        keys = h
        for k in range(2, n + 1):
            keys = keys[:-1] * np.uint64(0x9E3779B97F4A7C15) + h[k - 1 :]
        cum = np.concatenate(([0], np.cumsum([len(w) for w in words])))
        assert (G._greedy_repeated_chars(keys, cum, n) or 0) == reference(words, n)  # None: nothing repeats


def test_c4_rules():
    step = C4Quality(C4Config())
    five = "\n".join(f"This is sentence number {i} in the text." for i in range(5))
    assert step.check(make_doc(five)) is None
    assert step.check(make_doc("\n".join(five.splitlines()[:4]))) == "too_few_sentences"
    assert step.check(make_doc(five + "\nwe have lorem ipsum dolor here")) == "lorem_ipsum"
    assert step.check(make_doc(five + "\nthe code is { x } here")) == "curly_bracket"
    doc = make_doc(
        five
        + "\nPlease enable JavaScript to view.\nRead our privacy policy today.\nshort line\n[edit] cited fact here[1]."
    )
    assert step.check(doc) is None
    assert "JavaScript" not in doc.text and "privacy" not in doc.text and "short line" not in doc.text
    assert doc.text.endswith("cited fact here.")
    strict = C4Quality(C4Config(filter_no_terminal_punct=True))
    assert strict.check(make_doc(five.replace(".", ""))) == "too_few_sentences"


def test_c4_counts_sentences_and_splits_chinese_words():
    step = C4Quality(C4Config())
    assert (
        step.check(make_doc("One two three. Four five six! Seven eight nine? Ten more words. And the last one."))
        is None
    )
    zh = "\n".join(["今天我们去公园散步，天气非常好。"] * 5)
    assert step.check(make_doc(zh, lang="zh")) is None
    assert C4Quality(C4Config(cjk_word_split=False)).check(make_doc(zh, lang="zh")) == "too_few_sentences"


def test_fineweb_rules():
    step = FineWebQuality(FineWebConfig())
    assert step.check(make_doc(prose(12))) is None
    no_punct = "\n".join(f"a long line without any end mark number {i} here" for i in range(20))
    assert step.check(make_doc(no_punct)) == "line_punct_ratio"
    short = "\n".join(["Short one."] * 0 + [f"Tiny {i}." for i in range(7)] + [prose(2, seed=i) for i in range(3)])
    assert step.check(make_doc(short)) == "short_line_ratio"
    dup = prose(12) + "\n" + "\n".join([prose(2, seed=9).splitlines()[0]] * 2)
    assert step.check(make_doc(dup)) == "char_dup_ratio"
    listy = "\n".join(f"Incomprehensibilities{i} Antidisestablishmentarianism{i}." for i in range(30))
    assert step.check(make_doc(listy)) == "list_ratio"
    assert step.check(make_doc("。\n".join(["今天我们去公园散步天气非常好所以很开心"] * 1) + "。", lang="zh")) is None


def test_pii_masks_public_ips_emails_phones_and_drops_above_limit():
    step = PIIMasking(PIIConfig(max_hits=3))
    doc = make_doc("Mail jane.doe@example.com or call (555) 123-4567 from 8.8.8.8 not 192.168.1.1 or 10.0.0.1.")
    assert step.check(doc) is None
    assert doc.text == (
        "Mail |||EMAIL_ADDRESS||| or call |||PHONE_NUMBER||| from |||IP_ADDRESS||| not 192.168.1.1 or 10.0.0.1."
    )
    assert doc.meta["pii_masked"] == {"email": 1, "ip": 1, "phone": 1}
    many = make_doc(" ".join(f"user{i}@example.org" for i in range(4)))
    assert step.check(many) == "too_many_pii"
    clean = make_doc("Version 1.2.3 costs 12.50 and the year was 1999.")
    assert step.check(clean) is None and clean.text == "Version 1.2.3 costs 12.50 and the year was 1999."


def test_encoding_repair_fixes_mojibake_keeps_quotes_and_width(config):
    step = EncodingRepair(config.encoding)
    doc = make_doc("The cafÃ© said “hello”\r\nＦｕｌｌ\x07 width\x00")
    assert step.check(doc) is None
    assert doc.text == "The café said “hello”\nＦｕｌｌ width"


def test_encoding_fast_path_equals_ftfy_on_corpus(corpus, config):
    import ftfy

    from pipeline_project.cleaning import read_object

    step = EncodingRepair(config.encoding)
    paths = (
        sorted((corpus / "en_gutenberg").glob("*.txt"))[:3] + sorted((corpus / "en_gutenberg_latin1").glob("*.txt"))[:1]
    )
    for path in paths:
        [doc] = read_object(path.name, path.read_bytes(), config)
        text = doc.text[:200_000]
        assert step.fix(text) == ftfy.fix_text(text, config=step.fixer), path.name


def test_gutenberg_boilerplate_strip(config):
    text = (
        "The Project Gutenberg EBook of X\nheader\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\n"
        "Body text.\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\nlicense footer"
    )
    doc = make_doc(text)
    BoilerplateStrip(config.boilerplate).check(doc)
    assert doc.text == "Body text."


def test_language_id_offline_keeps_en_zh_and_drops_others():
    step = LanguageID(CleaningConfig().language)
    en, zh, ru = (
        make_doc(prose(), lang=None),
        make_doc("今天天气很好，我们一起去公园散步，然后回家吃饭。", lang=None),
        make_doc("Сегодня хорошая погода, и мы пошли гулять в парк вместе с друзьями.", lang=None),
    )
    assert step.check(en) is None and en.meta["lang"] == "en" and en.meta["lang_score"] > 0.65
    assert step.check(zh) is None and zh.meta["lang"] == "zh"
    assert step.check(ru) == "language_not_kept" and ru.meta["lang"] == "ru"
