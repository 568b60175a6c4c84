"""Write a report folder so that nothing is lost: all or nothing, and only our own files.
A thin user of the output layer (perfmodel/outputs.py), which writes each file.

    with staged_report(out, "B300_HBM3E_NVLINK5", inputs=...) as stage:   # a fresh folder beside `out`
        write every file into stage (each named `<report>_...`)
    # here each file has been written into `out` (outputs.write_file)

- Everything is drawn into a temporary folder beside `out`; only once all of it is there is
  each file written into `out` by `outputs.write_file` (atomic, locked, through a symlink, the
  mode kept). Every target is checked first, so a report whose files would overwrite one of the
  command's inputs writes nothing. If drawing fails, `out` is left as it was, and not created.
- Each report has its own manifest in `out`, `.<report>.perfmodel-report.json`: the files it
  wrote and their SHA-256. A second report into the same folder (another target) has another
  name and another manifest, and leaves the first one's files alone. Of the files a report's
  previous manifest lists, those it no longer writes (a figure it now skips) are removed, and
  only if the name is a plain name in `out` starting with `<report>_` and the file is still the
  bytes the report wrote (a hand-edited manifest, or a user's file saved over one of ours, never
  causes a deletion). No other file in `out` is ever touched.
- An exclusive lock (outputs.locked: `.<out>.perfmodel-lock` beside `out`, removed when done)
  serialises concurrent reports to one folder, so their files cannot interleave.
- Staging folders left by a killed run are removed by the next run (under the lock).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from perfmodel.inputs import InputError, load_json
from perfmodel.outputs import check_target, fsync_path, locked, write_file

MANIFEST_SUFFIX = ".perfmodel-report.json"
STAGE_TAG = ".perfmodel-staging-"
REPORT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class WriteError(OSError):
    """The report folder cannot be written; the message is one line naming it."""


def manifest_name(report: str) -> str:
    return f".{report}{MANIFEST_SUFFIX}"


def is_manifest(name: str) -> bool:
    """Whether a file name in a report folder is a report's manifest."""
    return name.startswith(".") and name.endswith(MANIFEST_SUFFIX)


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


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _own(name: str, report: str) -> bool:
    """A name a report may have written: a plain file name in the folder, `<report>_...`."""
    return (name.startswith(f"{report}_") and "/" not in name and os.sep not in name and "\x00" not in name
            and not is_manifest(name))


def previous_files(out: Path, report: str) -> dict[str, str]:
    """{file name: SHA-256} from the report's manifest in `out`, only the entries it may own."""
    try:  # through the input layer: a FIFO, a device or a runaway file in its place is no manifest
        data = load_json(out / manifest_name(report), "manifest")
    except InputError:
        return {}
    files = data.get("files") if isinstance(data, dict) and data.get("report") == report else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str) and _own(k, report)}


def _existing_parent(out: Path) -> Path:
    """The nearest existing ancestor of `out`'s parent (to create the rest on success only)."""
    p = out.parent
    while not p.exists():
        p = p.parent
    return p


@contextlib.contextmanager
def staged_report(out: str | os.PathLike, report: str, inputs: Iterable = ()) -> Iterator[Path]:
    """Yield an empty staging folder; on normal exit write its files into `out` (see module
    doc). `report`: the report's name, the prefix of every file it writes; `inputs`: the files
    the command read, which none of its files may overwrite."""
    out = Path(out)
    if not REPORT_NAME.fullmatch(report):
        raise ValueError(f"report name {report!r}: letters, digits, '_', '.', '-'")
    inputs = tuple(inputs)
    check_out(out)
    made = []  # parents of `out` created here, removed again if the report fails
    p = out.parent
    while not p.exists():
        made.append(p)
        p = p.parent
    stage = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with locked(out):
            for old in out.parent.glob(f".{out.name}{STAGE_TAG}*"):  # left by a killed run
                shutil.rmtree(old, ignore_errors=True)
            stage = Path(tempfile.mkdtemp(prefix=f".{out.name}{STAGE_TAG}", dir=out.parent))
            yield stage
            _commit(stage, out, report, inputs)
    except BaseException:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)
        if not out.exists() and made:  # remove the folders made for it
            for d in made:  # innermost first
                with contextlib.suppress(OSError):
                    d.rmdir()
        raise
    finally:
        if stage is not None and stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def _commit(stage: Path, out: Path, report: str, inputs: tuple) -> None:
    names = sorted(p.name for p in stage.iterdir() if p.is_file())
    stray = [n for n in names if not _own(n, report)]
    if stray:
        raise ValueError(f"report {report}: files not named {report}_...: {', '.join(stray)}")
    for name in names + [manifest_name(report)]:  # refuse before writing anything
        check_target(out / name, inputs, what="--out")
    old = previous_files(out, report) if out.is_dir() else {}
    out.mkdir(exist_ok=True)
    digests = {}
    for name in names:
        data = (stage / name).read_bytes()
        digests[name] = _sha256(data)
        write_file(out / name, data, inputs=inputs, what="--out")
    write_file(out / manifest_name(report), json.dumps({"report": report, "files": digests}, indent=1) + "\n",
               inputs=inputs, what="--out")
    for name, digest in old.items():  # our own files from an earlier report, no longer written
        p = out / name
        if name in digests or p.is_symlink() or not p.is_file():
            continue
        with contextlib.suppress(OSError):
            if _sha256(p.read_bytes()) == digest:  # still the bytes the report wrote
                p.unlink()
    fsync_path(out)


__all__ = ["MANIFEST_SUFFIX", "WriteError", "check_out", "dump_json", "is_manifest", "manifest_name", "previous_files",
           "staged_report"]
