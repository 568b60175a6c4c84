"""What the tools share that needs no GPU: the shape and knob mini-languages, and one-line errors.

Shapes (`--shape`): `KIND:key=value:key=value`; a value may list alternatives separated by `/`,
and the shape then stands for every combination, e.g. `mla:H=64:C=1/8:L=1024/8192` is four
shapes. The kinds and keys of each kernel are in `SHAPES`.

Knobs (a variant, `NAME:key=value,key=value`): keywords of the kernel's wrapper; a dotted key
sets a field of a config dict (`gate_up_config.split_k=7`); a key starting with `@` sets a
constant of the kernel's module while the variant runs (`@DOWN_PAIRS_PRELOAD_MAX_KB=0`).
Values are read as int, float, true/false, none, else a string.
"""

from __future__ import annotations

import itertools
import sys
from typing import NoReturn


class InputError(ValueError):
    """Bad command-line input: the message is the one line the tool prints."""


def fail(tool: str, message: str) -> NoReturn:
    """One line on stderr and exit code 2, as `perfmodel` does for bad input."""
    print(f"{tool}: {message}", file=sys.stderr)
    sys.exit(2)


# kernel -> shape kind -> key -> default (None: required). Attention: MLA (H heads, 512 + 64 latent
# dims) or GQA with Llama-3.1-8B / Qwen3-30B-A3B heads; C sequences, q query tokens each (a tree of
# q tokens), L cached positions. MoE: a model's expert shape (kimi: Kimi K2.6, one GPU; kimi_tp8:
# its TP8 slice; qwen3: Qwen3-30B-A3B) at T tokens, optionally overridden (H hidden, I expert
# width, E experts, k routed per token). DDTree builder: C sequences, budget B, D depths, V vocab.
_MOE = {"T": None, "H": 0, "I": 0, "E": 0, "k": 0}
SHAPES: dict[str, dict[str, dict[str, int | None]]] = {
    "attention": {"mla": {"H": 8, "C": 1, "q": 1, "L": None},
                  "llama": {"C": 1, "q": 1, "L": None},
                  "qwen": {"C": 1, "q": 1, "L": None}},
    "moe_w4a16": {"kimi": dict(_MOE), "kimi_tp8": dict(_MOE), "qwen3": dict(_MOE)},
    "moe_bf16": {"kimi_tp8": dict(_MOE), "qwen3": dict(_MOE)},
    "ddtree": {"ddtree": {"C": None, "B": None, "D": 15, "V": 163840}},
}


def parse_value(text: str):
    """'8' -> 8, '0.5' -> 0.5, 'true' -> True, 'none' -> None, anything else the string itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def parse_shapes(kernel: str, spec: str) -> list[dict]:
    """One `--shape` argument of `kernel` -> the shapes it stands for (dicts with `kind` and every
    key of the kind, defaults filled in)."""
    kinds = SHAPES.get(kernel)
    if kinds is None:
        raise InputError(f"unknown kernel {kernel!r} (one of {', '.join(SHAPES)})")
    kind, *fields = spec.split(":")
    if kind not in kinds:
        raise InputError(f"shape {spec!r}: unknown kind {kind!r} for {kernel} (one of {', '.join(kinds)})")
    keys = kinds[kind]
    given: dict[str, list[int]] = {}
    for field in fields:
        key, eq, values = field.partition("=")
        if not eq or key not in keys:
            raise InputError(f"shape {spec!r}: {field!r} is not key=value with a key of {kind} ({', '.join(keys)})")
        try:
            given[key] = [int(v) for v in values.split("/")]
        except ValueError:
            raise InputError(f"shape {spec!r}: {key} takes whole numbers, got {values!r}") from None
        if any(v <= 0 for v in given[key]):
            raise InputError(f"shape {spec!r}: {key} must be positive")
    missing = [k for k, d in keys.items() if d is None and k not in given]
    if missing:
        raise InputError(f"shape {spec!r}: {', '.join(missing)} not given")
    names = list(keys)
    choices = [given.get(k, [keys[k]]) for k in names]
    return [dict(kind=kind, **dict(zip(names, combo))) for combo in itertools.product(*choices)]


def shape_name(shape: dict) -> str:
    """The shape as it is written on the command line (zero overrides left out)."""
    return ":".join([shape["kind"]] + [f"{k}={v}" for k, v in shape.items() if k != "kind" and v != 0])


def parse_knobs(text: str) -> dict:
    """'a=1,b.c=2,@X=0' -> {'a': 1, 'b': {'c': 2}, '@X': 0}."""
    knobs: dict = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise InputError(f"knob {item!r} is not key=value")
        *parents, leaf = key.split(".")
        if parents and key.startswith("@"):
            raise InputError(f"knob {item!r}: a module constant (@NAME) has no fields")
        d = knobs
        for p in parents:
            d = d.setdefault(p, {})
            if not isinstance(d, dict):
                raise InputError(f"knob {item!r}: {p} is set twice")
        if leaf in d:
            raise InputError(f"knob {item!r}: {key} is set twice")
        d[leaf] = parse_value(value)
    return knobs


def parse_variant(text: str) -> tuple[str, dict]:
    """'NAME:knobs' -> (NAME, knobs); 'default' -> ('default', {})."""
    name, _, knobs = text.partition(":")
    if not name.strip():
        raise InputError(f"variant {text!r} has no name (NAME:key=value,...)")
    return name.strip(), parse_knobs(knobs)


def variants(specs: list[str], default: bool = True) -> dict[str, dict]:
    """`--variant` arguments -> name -> knobs, the wrapper's defaults first unless `default` is off
    or a variant is named 'default'."""
    out: dict[str, dict] = {"default": {}} if default else {}
    for spec in specs:
        name, knobs = parse_variant(spec)
        if name in out and not (name == "default" and not knobs and not out[name]):
            raise InputError(f"variant {name!r} given twice")
        out[name] = knobs
    if not out:
        raise InputError("no variant to run")
    return out


def grid(specs: list[str]) -> dict[str, dict]:
    """`--grid key=v1/v2` arguments -> one variant per combination, named by its knobs."""
    axes = []
    for spec in specs:
        key, eq, values = spec.partition("=")
        if not eq or not key or "," in spec:
            raise InputError(f"grid axis {spec!r} is not key=value/value/...")
        axes.append((key, [parse_value(v) for v in values.split("/")]))
    if len({k for k, _ in axes}) < len(axes):
        raise InputError("a grid key is given twice")
    out = {}
    for combo in itertools.product(*(vals for _, vals in axes)):
        text = ",".join(f"{k}={v}" for (k, _), v in zip(axes, combo))
        out[text] = parse_knobs(text)
    return out


def split_module_knobs(knobs: dict) -> tuple[dict, dict]:
    """(the wrapper's keywords, the module constants without their '@')."""
    consts = {k[1:]: v for k, v in knobs.items() if k.startswith("@")}
    return {k: v for k, v in knobs.items() if not k.startswith("@")}, consts
