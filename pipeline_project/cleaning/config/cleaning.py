"""`CleaningConfig`: the whole versioned configuration of the cleaning chain, and its hash.

Defaults follow DataTrove 0.10.1 (`datatrove.pipeline.filters.*`, `MinhashConfig`) unless a field says why not.
Bump `CleaningConfig.version` whenever a default changes what the chain keeps.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field

from pipeline_project.cleaning.config.profiles import ProfilesConfig
from pipeline_project.cleaning.config.steps import (
    BoilerplateConfig,
    C4Config,
    DedupConfig,
    EncodingRepairConfig,
    FineWebConfig,
    GopherQualityConfig,
    GopherRepetitionConfig,
    LanguageConfig,
    LimitsConfig,
    PIIConfig,
    ReaderConfig,
)
from pipeline_project.cleaning.decontam.index import DecontaminationConfig


class CleaningConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # 2: MinHash candidates are verified against the kept representative (dedup.minhash.verify), no chains
    # 3: readers: document cap (reader.max_document_bytes), 1 GiB decompression cap, binary content, BOM-less
    #    UTF-16/32, empty objects and HTML without extraction quarantined, lone surrogates replaced
    # 4: cleaning profiles (profile_config.py): en_web, zh_web (FineWeb-2 cmn_Hani), code (StarCoder2), books
    # 5: per-document CPU budget (limits), document cap enforced while inflating / transcoding, HTML visible text
    #    of code files by an HTML parser
    # 6: Parquet, WARC / WET, source files, tar and zip read; reader.text_field_fallbacks ("content"), meta_fields
    version: str = "6"
    reader: ReaderConfig = ReaderConfig()
    limits: LimitsConfig = LimitsConfig()
    encoding: EncodingRepairConfig = EncodingRepairConfig()
    boilerplate: BoilerplateConfig = BoilerplateConfig()
    language: LanguageConfig = LanguageConfig()
    gopher_repetition: GopherRepetitionConfig = GopherRepetitionConfig()
    gopher_quality: GopherQualityConfig = GopherQualityConfig()
    c4: C4Config = C4Config()
    fineweb: FineWebConfig = FineWebConfig()
    dedup: DedupConfig = DedupConfig()
    pii: PIIConfig = PIIConfig()
    profiles: ProfilesConfig = Field(default_factory=lambda: ProfilesConfig())
    # benchmark decontamination (`decontam_index`); off, it is left out of the hash (batches keep their hash)
    decontamination: DecontaminationConfig = DecontaminationConfig()

    def canonical_json(self) -> str:
        d = self.model_dump(mode="json")
        if self.decontamination.enabled:  # the benchmark files' content is part of the version
            d["decontamination"]["benchmark_sha256"] = self.decontamination.benchmark_sha256()
        else:
            del d["decontamination"]
        return json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    def config_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()
