"""perfmodel.measure: timing, benches, fits and profile writing (never imports perfmodel.model).

Entry point: `run_measure(out, only=None, quick=False, resume=False, progress=True) -> exit code`,
or `python -m perfmodel.measure --out profile.json [--quick] [--only a,b] [--resume]`.
"""


def run_measure(*args, **kwargs):
    from .runner import run_measure as _run

    return _run(*args, **kwargs)


__all__ = ["run_measure"]
