from pipeline_project.cleaning.steps.base import DocFilter, RunContext, Step, StepStats
from pipeline_project.cleaning.steps.c4 import C4Quality
from pipeline_project.cleaning.steps.dedup import ExactDedup, MinHashDedup
from pipeline_project.cleaning.steps.fineweb import FineWebQuality
from pipeline_project.cleaning.steps.gopher import GopherQuality, GopherRepetition
from pipeline_project.cleaning.steps.language import LanguageID
from pipeline_project.cleaning.steps.normalize import BoilerplateStrip, EncodingRepair, NonEmpty
from pipeline_project.cleaning.steps.pii import PIIMasking

__all__ = [
    "BoilerplateStrip",
    "C4Quality",
    "DocFilter",
    "EncodingRepair",
    "ExactDedup",
    "FineWebQuality",
    "GopherQuality",
    "GopherRepetition",
    "LanguageID",
    "MinHashDedup",
    "NonEmpty",
    "PIIMasking",
    "RunContext",
    "Step",
    "StepStats",
]
