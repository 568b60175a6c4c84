"""Reading user-supplied input files and numbers: one clear line for every bad input.

Every file the tool reads on a user's behalf (profiles, `--hw-file`, `--model-file`, HuggingFace
`config.json`, calibration inputs and results, bench results, `--lengths-file`, `--acceptance
file:...`) goes through this module:

- `read_text`: a regular file (a FIFO or a device is refused before it is opened, and the file is
  opened non-blocking and checked again, so nothing blocks), no larger than `MAX_INPUT_BYTES`,
  UTF-8 text without NUL bytes.
- `parse_json` / `parse_yaml` (and `load_json` / `load_yaml`, which read through `read_text`):
  nesting no deeper than `MAX_DEPTH` (counted without recursion, before any parser recurses), no
  duplicate keys, no YAML anchors, aliases or merge keys (alias bombs), no NaN or Infinity.
- `validated`: a pydantic model of the data, its first error as one line naming the file, the
  field and the value.

Every failure is an `InputError` (a ValueError) whose message is one line naming the file and,
where there is one, the key path. `finite_json` is the one JSON writer of the CLI: it refuses NaN
and Infinity (`allow_nan=False`), so that a NaN reaching an output is an error here, not invalid
JSON there. Standard library, plus yaml for YAML files and pydantic for `validated`, each imported
when first needed.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_INPUT_BYTES = 10 * 1000 * 1000  # 10 MB: the largest measured profile is ~0.9 MB
MAX_DEPTH = 64  # nesting of mappings and lists: the shipped files and HF configs nest a few levels deep


def escaped(text: Any) -> str:
    """`text` with its line breaks shown as \\n and \\r (a file name may hold them)."""
    return str(text).replace("\r", "\\r").replace("\n", "\\n")


class InputError(ValueError):
    """A bad input file or value; the message is one line naming it (a line break in a file's name
    is shown escaped)."""

    def __init__(self, msg: str):
        super().__init__(escaped(msg))


class NotJSON(InputError):
    """Text that does not parse as JSON (JSON lines do not: each line is parsed on its own)."""


def one_line(text: Any) -> str:
    return " ".join(str(text).split())


def _open_regular(p: Path, label: str) -> int:
    """A read-only descriptor of the regular file `p`: refused before opening when the path is no
    regular file, opened non-blocking (a FIFO swapped in meanwhile cannot block) and checked again."""
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(f"{label}: no such file") from None
    except OSError as e:
        raise InputError(f"{label}: cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{label}: is a directory, expected a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{label}: not a regular file (a FIFO, socket or device), expected a file")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as e:
        raise InputError(f"{label}: cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{label}: not a regular file (a FIFO, socket or device), expected a file")
    return fd


def read_text(path: str | os.PathLike, what: str) -> str:
    """The text of a user's input file, or InputError naming `what` (e.g. "profile") and the path."""
    p = Path(path)
    label = f"{what} {p}"
    fd = _open_regular(p, label)
    try:
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            raw = f.read(MAX_INPUT_BYTES + 1) if size <= MAX_INPUT_BYTES else b""
    except OSError as e:
        raise InputError(f"{label}: cannot read ({e.strerror or e})") from None
    if max(size, len(raw)) > MAX_INPUT_BYTES:  # a file growing as it is read: the bytes read count
        raise InputError(f"{label}: {max(size, len(raw)) / 1e6:.1f} MB is larger than the {MAX_INPUT_BYTES / 1e6:.0f} MB "
                         "limit for input files")
    if b"\x00" in raw:
        raise InputError(f"{label}: binary file (contains NUL bytes), expected UTF-8 text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{label}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})") from None


# ----------------------------------------------------------------------------- structure
def _path(keys: tuple) -> str:
    return ".".join(str(k) for k in keys) or "<root>"


class _Dup(dict):
    """A JSON object that repeated a key (the key kept in `dup`), found by `_check_tree` with its path."""

    dup: str = ""


class _Hooks:
    """json.loads hooks that note what `_check_tree` must then find with its path: a repeated key,
    a NaN or Infinity token, a number too large for a float."""

    def __init__(self):
        self.suspect = False

    def pairs(self, pairs: list[tuple[str, Any]]) -> dict:
        d = dict(pairs)
        if len(d) == len(pairs):
            return d
        self.suspect = True
        seen: set[str] = set()
        out = _Dup(d)
        out.dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        return out

    def constant(self, name: str) -> float:
        self.suspect = True
        return float(name)

    def number(self, text: str) -> float:
        v = float(text)
        if math.isinf(v):
            self.suspect = True
        return v


def _check_tree(data: Any, label: str, finite: bool = True) -> None:
    """No repeated key and (`finite`) no NaN or Infinity anywhere in parsed data (walked without recursion)."""
    stack: list[tuple[tuple, Any]] = [((), data)]
    while stack:
        keys, node = stack.pop()
        if isinstance(node, _Dup):
            raise InputError(f"{label}: {one_line(_path(keys + (node.dup,)))}: duplicate key {node.dup!r} (each key once)")
        if isinstance(node, dict):
            stack.extend((keys + (k,), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((keys + (i,), v) for i, v in enumerate(node))
        elif finite and isinstance(node, float) and not math.isfinite(node):
            raise InputError(f"{label}: {_path(keys)}: {node} is not a finite number")


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _json_depth_ok(text: str, label: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH, counted over the brackets outside strings."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth = 0
    for c in _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)):
        depth += 1 if c in "[{" else -1
        if depth > MAX_DEPTH:
            raise InputError(f"{label}: nested more than {MAX_DEPTH} levels deep")


def parse_json(text: str, label: str, finite: bool = True) -> Any:
    """JSON text checked as `load_json` checks a file; `label` names it in errors. `finite=False`
    lets NaN and Infinity through, for files that hold them where perfmodel reads nothing (its
    schema then checks the fields it reads)."""
    _json_depth_ok(text, label)
    hooks = _Hooks()
    try:
        data = json.loads(text, object_pairs_hook=hooks.pairs, parse_constant=hooks.constant, parse_float=hooks.number)
    except json.JSONDecodeError as e:
        raise NotJSON(f"{label}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except RecursionError:  # not reached: the depth is checked first
        raise InputError(f"{label}: nested too deeply") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise InputError(f"{label}: not valid JSON ({one_line(e)})") from None
    if hooks.suspect:  # walked only then: a profile holds tens of thousands of numbers
        _check_tree(data, label, finite)
    return data


def load_json(path: str | os.PathLike, what: str) -> Any:
    """A user's JSON file, read by `read_text` and checked by `parse_json`."""
    return parse_json(read_text(path, what), f"{what} {Path(path)}")


@functools.cache
def _yaml_loader():
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[misc, valid-type]
        """SafeLoader that refuses a key given twice in one mapping."""

        def construct_mapping(self, node, deep=False):
            seen: set = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    again = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key: SafeConstructor says so
                if again:
                    raise InputError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r} (each key once)")
            return super().construct_mapping(node, deep=deep)

    return yaml, StrictLoader


def _yaml_events_ok(yaml, loader, text: str) -> None:
    """One pass over the YAML events (the parser does not recurse): no anchor, alias or merge key,
    nesting at most MAX_DEPTH."""
    depth = 0
    for ev in yaml.parse(text, Loader=loader):
        where = f"line {ev.start_mark.line + 1}" if ev.start_mark else ""
        if isinstance(ev, yaml.AliasEvent) or getattr(ev, "anchor", None):
            raise InputError(f"{where}: YAML anchors and aliases are not accepted (write the value out)")
        if isinstance(ev, yaml.ScalarEvent) and ev.value == "<<" and ev.implicit[0]:
            raise InputError(f"{where}: YAML merge keys (<<) are not accepted (write the keys out)")
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise InputError(f"{where}: nested more than {MAX_DEPTH} levels deep")
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def parse_yaml(text: str, label: str) -> Any:
    """YAML text checked as `load_yaml` checks a file; `label` names it in errors."""
    yaml, loader = _yaml_loader()
    try:
        _yaml_events_ok(yaml, loader, text)
        data = yaml.load(text, Loader=loader)
    except InputError as e:
        msg = str(e)
        raise InputError(f"{label}: {one_line(msg)}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise InputError(f"{label}: malformed YAML{where}: {one_line(problem)}") from None
    except RecursionError:  # not reached: the depth is checked first
        raise InputError(f"{label}: nested too deeply") from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise InputError(f"{label}: malformed YAML ({one_line(e)})") from None
    _check_tree(data, label)
    return data


def load_yaml(path: str | os.PathLike, what: str) -> Any:
    """A user's YAML file, read by `read_text` and checked by `parse_yaml`."""
    return parse_yaml(read_text(path, what), f"{what} {Path(path)}")


def kind_of(x: Any) -> str:
    """What a parsed value is, in JSON's words."""
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(x), "a number")


# ----------------------------------------------------------------------------- schemas
def validation_line(label: str, err: Any) -> str:
    """A pydantic ValidationError as one line: '<label>: <field path>: <what is wrong>, got <value> (+N more)'."""
    errors = err.errors(include_url=False)
    first = errors[0]
    loc = ".".join(str(p) for p in first["loc"]) or "<root>"
    msg = first["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    if first["type"] == "extra_forbidden":
        msg = "unknown field (not in the schema)"
    elif "got" not in msg and "input" in first and not isinstance(first["input"], (dict, list, tuple)):
        msg = f"{msg}, got {first['input']!r}"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{escaped(label)}: {one_line(loc)}: {one_line(msg)}{more}"


def validated(schema: Any, data: Any, label: str, **kw) -> Any:
    """`schema.model_validate(data)`, a ValidationError as `validation_line`'s InputError."""
    from pydantic import ValidationError

    if not isinstance(data, dict):
        raise InputError(f"{label}: expected a mapping of fields, got {kind_of(data)}")
    try:
        return schema.model_validate(data, **kw)
    except ValidationError as e:
        raise InputError(validation_line(label, e)) from None


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
