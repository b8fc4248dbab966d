from __future__ import annotations

import pytest

from pipeline_project.training.presets import build_model
from pipeline_project.training.trainer import seed_everything
from pipeline_project_tests.training.helpers import SMALL_VOCAB


@pytest.fixture
def tiny_model():
    seed_everything(0)
    return build_model("tiny", SMALL_VOCAB)


@pytest.fixture(scope="session")
def deepseek_tokenizer():
    from pipeline_project.streaming.tokenizer import load_tokenizer

    return load_tokenizer()
