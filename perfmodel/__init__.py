"""perfmodel: measure LLM-decode kernels here, project decode throughput there.

In Python: `perfmodel.project(target="b300", gpus=8, model="kimi-k2.6")` returns a typed
`perfmodel.Projection`; `perfmodel.Request(...)` validates a request. The names are imported on
first use, so `import perfmodel` and `perfmodel --help` stay light (no torch, no numpy).
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("perfmodel")  # the one place it is written is pyproject.toml
except PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
    __version__ = "0+unknown"

_EXPORTS = {
    "project": "perfmodel.api",
    "step": "perfmodel.api",
    "projector": "perfmodel.api",
    "resolve": "perfmodel.api",
    "Projector": "perfmodel.model.project",
    "Request": "perfmodel.scenario",
    "ProjectionError": "perfmodel.errors",
    "Projection": "perfmodel.model.result",
    "Point": "perfmodel.model.result",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'perfmodel' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
