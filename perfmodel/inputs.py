"""Reading user-supplied input files and numbers: one clear line for every bad input.

Every file the tool reads on a user's behalf (`--profile`, `--hw-file`, `--model-file`,
`--acceptance file:...`) goes through `read_text`: it must be a regular file no larger than
`MAX_INPUT_BYTES`, and UTF-8 text. The message names the file and what is wrong with it.

`finite_json` is the one JSON writer of the CLI: it refuses NaN and Infinity
(`allow_nan=False`), so that a NaN reaching an output is an error here, not invalid JSON
there. Pure python: no torch, no numpy.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path

MAX_INPUT_BYTES = 10 * 1000 * 1000  # 10 MB: the largest measured profile is ~0.2 MB


class InputError(ValueError):
    """A bad input file or value; the message is one line naming it."""


def read_text(path: str | os.PathLike, what: str) -> str:
    """The text of a user's input file, or InputError naming `what` (e.g. "profile") and the path."""
    p = Path(path)
    label = f"{what} {p}"
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(f"{label}: no such file") from None
    except OSError as e:
        raise InputError(f"{label}: cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{label}: is a directory, expected a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{label}: not a regular file")
    if st.st_size > MAX_INPUT_BYTES:
        raise InputError(f"{label}: {st.st_size / 1e6:.1f} MB is larger than the {MAX_INPUT_BYTES / 1e6:.0f} MB limit for input files")
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_INPUT_BYTES + 1)
    except OSError as e:
        raise InputError(f"{label}: cannot read ({e.strerror or e})") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise InputError(f"{label}: larger than the {MAX_INPUT_BYTES / 1e6:.0f} MB limit for input files")
    if b"\x00" in raw:
        raise InputError(f"{label}: binary file (contains NUL bytes), expected UTF-8 text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{label}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None


def finite_number(value: float, where: str, *, lo: float | None = None, hi: float | None = None,
                  lo_open: bool = False) -> float:
    """`value` if it is a finite number within [lo, hi] ((lo, hi] with lo_open), else InputError naming `where`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where} {value!r}: expected a number")
    if not math.isfinite(value):
        raise InputError(f"{where} {value}: must be a finite number")
    if lo is not None and (value <= lo if lo_open else value < lo):
        raise InputError(f"{where} {value:g}: must be {'>' if lo_open else '≥'} {lo:g}")
    if hi is not None and value > hi:
        raise InputError(f"{where} {value:g}: must be ≤ {hi:g}")
    return value


def finite_json(obj, **kw) -> str:
    """json.dumps that refuses NaN/Infinity (a bug upstream, never invalid JSON downstream)."""
    return json.dumps(obj, allow_nan=False, **kw)


def nan_to_none(x):
    """None for a float NaN/Infinity (JSON null), else x."""
    return None if isinstance(x, float) and not math.isfinite(x) else x
