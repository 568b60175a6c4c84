"""Find, parse, validate and cache the YAML specs.

GPU and link files live in the package data of `perfmodel.hwspecs` (gpus/, links/,
memory_kinds.yaml); model presets in `perfmodel/modelspecs/`. Files are located through
importlib.resources so the lookup works for installed and editable installs alike.

Every failure is a `SpecError` whose message is one line naming the file and the field.
This module sits on the CLI's <1 s path: it imports only pydantic and yaml.
"""

from __future__ import annotations

import difflib
import functools
import importlib.resources
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from perfmodel.inputs import InputError, one_line, parse_yaml, read_text, validated, validation_line
from perfmodel.specs.schema import AcceptanceData, GpuSpec, InterconnectSpec, MemoryKinds, ModelSpec

M = TypeVar("M", bound=BaseModel)


class SpecError(ValueError):
    """A spec file or name is invalid. The message is a single line."""


# ----------------------------------------------------------------------------- locations


def _hw_root():
    return importlib.resources.files("perfmodel.hwspecs")


def _models_root():
    try:
        return importlib.resources.files("perfmodel") / "modelspecs"
    except (NotADirectoryError, TypeError, ModuleNotFoundError):
        # perfmodel may be a namespace package (no __init__.py) in some checkouts.
        return Path(__file__).resolve().parent.parent / "modelspecs"


_KINDS: dict[str, tuple[Callable[[], Any], str, type[BaseModel], str]] = {
    # kind: (root, display prefix, schema, noun)
    "gpu": (lambda: _hw_root() / "gpus", "hwspecs/gpus", GpuSpec, "GPU"),
    "link": (lambda: _hw_root() / "links", "hwspecs/links", InterconnectSpec, "link"),
    "model": (_models_root, "perfmodel/modelspecs", ModelSpec, "model"),
}


# ----------------------------------------------------------------------------- parsing


def _format_validation_error(label: str, err: ValidationError) -> str:
    return validation_line(label, err)


def _parse_text(text: str, label: str, schema: type[M]) -> M:
    """A spec's YAML text (strict: no duplicate key, anchor, runaway nesting or NaN) validated by `schema`."""
    try:
        data = parse_yaml(text, label)
        if not isinstance(data, dict):
            raise InputError(f"{label}: <root>: expected a mapping, got {type(data).__name__}")
        return validated(schema, data, label)
    except InputError as e:
        raise SpecError(str(e)) from None


def _read(res, label: str) -> str:
    try:
        return res.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(one_line(f"{label}: cannot read: {e}")) from None


def _load_path(path: str | Path, schema: type[M]) -> M:
    p = Path(path)
    label = str(p)
    try:
        text = read_text(p, f"{_NOUN[schema]} file")  # a regular file, UTF-8, at most 10 MB
    except InputError as e:
        raise SpecError(str(e)) from None
    return _parse_text(text, label, schema)


_NOUN = {GpuSpec: "GPU", InterconnectSpec: "link", ModelSpec: "model", MemoryKinds: "memory kinds",
         AcceptanceData: "acceptance data"}


def _check_name(spec: BaseModel, stem: str, label: str) -> None:
    if spec.name != stem:  # type: ignore[attr-defined]
        raise SpecError(f"{label}: name: must match the file name '{stem}', got '{spec.name}'")  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- indexes


@functools.cache
def _load_named(kind: str, name: str) -> BaseModel:
    root, prefix, schema, _ = _KINDS[kind]
    label = f"{prefix}/{name}.yaml"
    spec = _parse_text(_read(root() / f"{name}.yaml", label), label, schema)
    _check_name(spec, name, label)
    return spec


@functools.cache
def _names(kind: str) -> tuple[str, ...]:
    root = _KINDS[kind][0]()
    return tuple(sorted(r.name[: -len(".yaml")] for r in root.iterdir() if r.name.endswith(".yaml")))


@functools.cache
def _alias_index(kind: str) -> dict[str, str]:
    prefix = _KINDS[kind][1]
    index: dict[str, str] = {}
    for name in _names(kind):
        spec = _load_named(kind, name)
        for key in (name, *spec.aliases):  # type: ignore[attr-defined]
            key = key.lower()
            if key in index and index[key] != name:
                raise SpecError(f"{prefix}/{name}.yaml: aliases: '{key}' is already used by '{index[key]}'")
            index[key] = name
    return index


def _resolve(kind: str, name_or_alias: str) -> BaseModel:
    key = name_or_alias.strip().lower()
    if key in _names(kind):
        return _load_named(kind, key)
    index = _alias_index(kind)
    if key in index:
        return _load_named(kind, index[key])
    noun = _KINDS[kind][3]
    close = difflib.get_close_matches(key, list(index), n=3, cutoff=0.5)
    hint = f"; did you mean: {', '.join(close)}?" if close else f"; known: {', '.join(_names(kind))}"
    raise SpecError(f"unknown {noun} '{name_or_alias}'{hint}")


# ----------------------------------------------------------------------------- public API


def load_gpu(name_or_alias: str) -> GpuSpec:
    return _resolve("gpu", name_or_alias)  # type: ignore[return-value]


def load_link(name: str) -> InterconnectSpec:
    return _resolve("link", name)  # type: ignore[return-value]


def load_model(name: str) -> ModelSpec:
    return _resolve("model", name)  # type: ignore[return-value]


@functools.cache
def load_memory_kinds() -> MemoryKinds:
    label = "hwspecs/memory_kinds.yaml"
    return _parse_text(_read(_hw_root() / "memory_kinds.yaml", label), label, MemoryKinds)


def list_gpus() -> list[str]:
    return list(_names("gpu"))


def list_links() -> list[str]:
    return list(_names("link"))


def list_models() -> list[str]:
    return list(_names("model"))


def load_gpu_file(path: str | Path) -> GpuSpec:
    """Validate a GPU spec outside the registry (user-supplied file); not cached."""
    return _load_path(path, GpuSpec)


def load_model_file(path: str | Path) -> ModelSpec:
    """Validate a model spec outside the registry (user-supplied file); not cached."""
    return _load_path(path, ModelSpec)


def load_link_file(path: str | Path) -> InterconnectSpec:
    return _load_path(path, InterconnectSpec)


__all__ = [
    "SpecError",
    "load_gpu",
    "load_link",
    "load_model",
    "load_memory_kinds",
    "list_gpus",
    "list_links",
    "list_models",
    "load_gpu_file",
    "load_model_file",
    "load_link_file",
]


@functools.cache
def load_acceptance_data() -> AcceptanceData:
    """The published acceptance lengths the workload presets are built from
    (perfmodel/data/acceptance.yaml, shipped with the package)."""
    label = "perfmodel/data/acceptance.yaml"
    return _parse_text(_read(importlib.resources.files("perfmodel") / "data" / "acceptance.yaml", label), label,
                       AcceptanceData)


def load_acceptance_file(path: str | Path) -> AcceptanceData:
    """A user's own acceptance figures in the same format."""
    return _load_path(path, AcceptanceData)
