"""Hardware and model specs: pydantic schemas and the YAML registry."""

from perfmodel.specs.registry import (
    SpecError,
    list_gpus,
    list_links,
    list_models,
    load_gpu,
    load_gpu_file,
    load_link,
    load_link_file,
    load_memory_kinds,
    load_model,
    load_model_file,
)
from perfmodel.specs.schema import (
    WEIGHT_BYTES,
    ComputeSpec,
    DrafterSpec,
    GpuSpec,
    GQASpec,
    InterconnectCalibrated,
    InterconnectPeak,
    InterconnectSpec,
    LinkKind,
    LinkSpec,
    MemoryKind,
    MemoryKinds,
    MemoryKindSpec,
    MemorySpec,
    MLASpec,
    ModelDtypes,
    ModelSpec,
    MoESpec,
    Sourced,
    SourcedFraction,
    Strict,
    WeightDtype,
)

__all__ = [
    "SpecError", "list_gpus", "list_links", "list_models", "load_gpu", "load_gpu_file",
    "load_link", "load_link_file", "load_memory_kinds", "load_model", "load_model_file",
    "WEIGHT_BYTES", "ComputeSpec", "DrafterSpec", "GpuSpec", "GQASpec", "InterconnectCalibrated",
    "InterconnectPeak", "InterconnectSpec", "LinkKind", "LinkSpec", "MemoryKind", "MemoryKinds",
    "MemoryKindSpec", "MemorySpec", "MLASpec", "ModelDtypes", "ModelSpec", "MoESpec", "Sourced",
    "SourcedFraction", "Strict", "WeightDtype",
]
