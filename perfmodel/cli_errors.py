"""Command-line parse errors as one line naming the option and the bad value, exit code 2.

typer reports a value it cannot convert (`--gpus eight`) in a boxed, multi-line panel that
names the option but not the value. `OneLineErrors` (the CLI's root command class) prints
instead, on stderr:

    perfmodel: --gpus 'eight': Input should be a valid integer, unable to parse string as an integer

Other usage errors (no arguments: help) are shown as typer shows them.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.17 vendors click
    from typer._click import exceptions as _exc
except ImportError:  # pragma: no cover
    from click import exceptions as _exc


def _given(opts: list[str], argv: list[str]) -> str | None:
    """The value given on the command line to an option with names `opts` (last one wins)."""
    val = None
    for i, tok in enumerate(argv):
        for o in opts:
            if tok == o and i + 1 < len(argv):
                val = argv[i + 1]
            elif o.startswith("--") and tok.startswith(o + "="):
                val = tok[len(o) + 1:]
    return val


def one_line(e: Exception, argv: list[str]) -> str | None:
    """The one-line message for a parse error, or None to let typer show it."""
    if isinstance(e, _exc.NoArgsIsHelpError):
        return None
    msg = " ".join(str(getattr(e, "message", e)).split())
    if isinstance(e, _exc.MissingParameter):
        return " ".join(e.format_message().split())
    if isinstance(e, _exc.BadParameter):
        p = e.param
        opts = list(getattr(p, "opts", []) or []) + list(getattr(p, "secondary_opts", []) or [])
        name = opts[0] if opts else (e.param_hint or getattr(p, "name", "") or "argument")
        val = _given(opts, argv) if opts else None
        return f"{name} {val!r}: {msg}" if val is not None else f"{name}: {msg}"
    if isinstance(e, _exc.UsageError):
        return " ".join(e.format_message().split())
    return None


class OneLineErrors(TyperGroup):
    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode: bool = True, **extra: Any):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        try:
            rv = super().main(argv, prog_name, complete_var, False, **extra)
        except _exc.ClickException as e:
            line = one_line(e, argv)
            if line is None:
                return super().main(argv, prog_name, complete_var, True, **extra)  # typer's own display
            print(f"perfmodel: {line}", file=sys.stderr)
            sys.exit(e.exit_code)
        except typer.Abort:
            print("perfmodel: aborted", file=sys.stderr)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)
