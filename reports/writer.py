"""Write a report folder so that nothing is lost: all or nothing, and only our own files.

    with staged_report(out) as stage:     # a fresh folder beside `out`
        write every file into stage
    # here each file has been renamed into `out`

- Everything is written into a temporary folder beside `out` (same file system), and only
  once all of it is written is each file renamed into place (os.replace: a reader sees the
  old file or the new one, never a part). If writing fails, `out` is left exactly as it was,
  and is not created.
- A manifest in `out` (`.perfmodel-report.json`) lists the files the report wrote. Files of
  an earlier report that this one no longer writes (a figure it now skips) are removed;
  no other file in `out` is ever touched.
- An exclusive lock (fcntl.flock on `.<out>.perfmodel-lock` beside `out`) serialises
  concurrent reports to one folder, so their files cannot interleave; the lock file is removed
  when the report is done (none is left beside `out`).
- Staging folders left by a killed run are removed by the next run (under the lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from perfmodel.profile import fsync_path

MANIFEST = ".perfmodel-report.json"
STAGE_TAG = ".perfmodel-staging-"
LOCK_SUFFIX = ".perfmodel-lock"


class WriteError(OSError):
    """The report folder cannot be written; the message is one line naming it."""


def check_out(out: str | os.PathLike) -> None:
    """Fail early, touching nothing, if `out` cannot become the report folder."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise WriteError(f"--out {out}: exists and is not a directory")
    top = _existing_parent(out)
    if not top.is_dir():
        raise WriteError(f"--out {out}: {top} is not a directory")
    if not os.access(top, os.W_OK | os.X_OK):
        raise WriteError(f"--out {out}: {top} is not writable")


def dump_json(doc) -> str:
    """JSON text with every NaN/Infinity written as null (not available), never as NaN."""
    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, set):
            return sorted(clean(v) for v in x)
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x
    return json.dumps(clean(doc), indent=1, allow_nan=False) + "\n"


def _manifest(out: Path) -> list[str]:
    try:
        data = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
        files = data.get("files", []) if isinstance(data, dict) else []
        return [f for f in files if isinstance(f, str) and f and "/" not in f and f not in (".", "..", MANIFEST)]
    except (OSError, ValueError):
        return []


def _lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}{LOCK_SUFFIX}"


@contextlib.contextmanager
def _locked(out: Path) -> Iterator[None]:
    """Hold the lock file beside `out`, and remove it before letting go, so that no lock file is
    left beside `--out`. A waiter that wakes on a lock file its holder removed (its inode no longer
    at the path) opens the path again, so two runs never hold two files at once."""
    path = _lock_path(out)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held, now = os.fstat(fd), os.stat(path)
            if (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                break
        except FileNotFoundError:
            pass  # removed by the run before us: lock the next one
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # still holding it: a waiter on this inode retries
        os.close(fd)  # closing releases the lock


def _existing_parent(out: Path) -> Path:
    """The nearest existing ancestor of `out`'s parent (to create the rest on success only)."""
    p = out.parent
    while not p.exists():
        p = p.parent
    return p


@contextlib.contextmanager
def staged_report(out: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty staging folder; on normal exit move its files into `out` (see module doc)."""
    out = Path(out)
    check_out(out)
    made = []  # parents of `out` created here, removed again if the report fails
    p = out.parent
    while not p.exists():
        made.append(p)
        p = p.parent
    stage = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with _locked(out):
            for old in out.parent.glob(f".{out.name}{STAGE_TAG}*"):  # left by a killed run
                shutil.rmtree(old, ignore_errors=True)
            stage = Path(tempfile.mkdtemp(prefix=f".{out.name}{STAGE_TAG}", dir=out.parent))
            yield stage
            _commit(stage, out)
    except BaseException:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        if not out.exists() and made:  # remove the folders made for it (and the lock file in them)
            with contextlib.suppress(OSError):
                _lock_path(out).unlink()
            for d in made:  # innermost first
                with contextlib.suppress(OSError):
                    d.rmdir()
        raise
    finally:
        if stage is not None and stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def _commit(stage: Path, out: Path) -> None:
    names = sorted(p.name for p in stage.iterdir() if p.is_file() and p.name != MANIFEST)
    for name in names:
        fsync_path(stage / name)
    old = _manifest(out) if out.is_dir() else []
    (stage / MANIFEST).write_text(json.dumps({"files": names}, indent=1) + "\n", encoding="utf-8")
    fsync_path(stage / MANIFEST)
    out.mkdir(exist_ok=True)
    for name in names:
        os.replace(stage / name, out / name)
    os.replace(stage / MANIFEST, out / MANIFEST)
    for name in set(old) - set(names):  # our own files from an earlier report, no longer written
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            (out / name).unlink()
    fsync_path(out)


__all__ = ["MANIFEST", "WriteError", "check_out", "dump_json", "staged_report"]
