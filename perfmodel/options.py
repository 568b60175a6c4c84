"""The scenario's CLI options, generated from its one declaration (`perfmodel.scenario.Request`).

`@scenario_options` gives a typer command every scenario field as an option (flags, help and
default from the field's `Cli` record); the command receives one `opts: ScenarioOptions`. Grid
fields (`--target`, `--gpus`, `--parallel`) take comma lists: `project` and `report` accept one
value each (`opts.request()`), `compare` runs the cross product (`opts.requests()`).
`@scenario_options(only=..., optional=True)` gives a subset, each defaulting to "not given"
(`calibrate --from-vllm`'s setup).
"""

from __future__ import annotations

import functools
import inspect
import itertools
import typing
from typing import Optional

import typer

from perfmodel.errors import ProjectionError
from perfmodel.scenario import Request, fields, make_request, parse_ints, split_list


def _base(ann):
    """The plain type under Annotated[...] and `X | None`."""
    while typing.get_origin(ann) is typing.Annotated:
        ann = typing.get_args(ann)[0]
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if args and len(args) < len(typing.get_args(ann)) and len(args) == 1:  # X | None
        return _base(args[0])
    return ann


def _cli_type(ann, cli) -> type:
    """The type typer parses the option's text as (before the field's own parser, if any)."""
    if cli.parse is not None or cli.grid:
        return str
    base = _base(ann)
    if base in (bool, float, int):
        return base
    return Optional[str]  # noqa: UP045 (typer needs a runtime type)


class ScenarioOptions:
    """The scenario options as typed on the command line."""

    def __init__(self, values: dict[str, typing.Any]):
        self.values = values

    def __getattr__(self, name: str):
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def given(self) -> dict[str, typing.Any]:
        """Field values parsed from their text (a grid field's as the list of its values); options
        left at "not given" (None) are left out."""
        out = {}
        for name, (_, _, cli) in fields().items():
            v = self.values.get(name)
            if v is None:
                continue
            if cli.grid:
                out[name] = _grid_items(name, v, cli)
            else:
                out[name] = cli.parse(v) if cli.parse is not None and isinstance(v, str) else v
        return out

    def requests(self) -> list[Request]:
        """The cross product of the grid fields' comma lists, in declaration order."""
        kw = self.given()
        grid = [[(n, x) for x in kw.pop(n)] for n, (_, _, cli) in fields().items() if cli.grid and n in kw]
        return [make_request(**kw, **dict(combo)) for combo in itertools.product(*grid)]

    def single(self) -> dict[str, typing.Any]:
        """`given()` with one value per grid field (a comma list here is an error)."""
        kw = self.given()
        for name, (_, _, cli) in fields().items():
            if cli.grid and name in kw:
                if len(kw[name]) > 1:
                    raise ProjectionError(f"{cli.flags[0]} '{self.values[name]}': one value here; "
                                          "`perfmodel compare` takes lists")
                kw[name] = kw[name][0]
        return kw

    def request(self) -> Request:
        """The one request of `project`/`report`."""
        return make_request(**self.single())


def _grid_items(name: str, v, cli) -> list:
    if not isinstance(v, str):
        return [v]
    if typing.get_args(fields()[name][0])[:1] == (int,):
        return parse_ints(v, cli.flags[0])
    return split_list(v) or [v]


def scenario_options(fn=None, *, only: tuple[str, ...] | None = None, optional: bool = False, help_prefix: str = ""):
    """Give a typer command the scenario fields as options; it receives them as `opts`."""
    if fn is None:
        return functools.partial(scenario_options, only=only, optional=optional, help_prefix=help_prefix)
    sig = inspect.signature(fn)
    resolved = typing.get_type_hints(fn)
    rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=resolved.get(name, p.annotation))
            for name, p in sig.parameters.items() if name != "opts"]
    decl = {n: f for n, f in fields().items() if only is None or n in only}
    params = []
    for name, (ann, default, cli) in decl.items():
        t = _cli_type(ann, cli)
        if optional and t is not bool:
            t, typed = Optional[t], None  # noqa: UP045 (typer needs a runtime type)
        elif optional:
            typed = default
        else:
            typed = cli.cli_default if cli.cli_default is not None else default
            if typed is None:
                t = Optional[t]  # noqa: UP045 (typer needs a runtime type)
            elif t is str and not isinstance(typed, str):
                typed = str(typed)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=t,
                                        default=typer.Option(typed, *cli.flags, help=help_prefix + cli.help)))

    @functools.wraps(fn)
    def wrapper(**kw):
        opts = ScenarioOptions({n: kw.pop(n) for n in decl})
        return fn(opts=opts, **kw)

    wrapper.__signature__ = sig.replace(parameters=params + rest, return_annotation=inspect.Signature.empty)
    wrapper.__annotations__ = {p.name: p.annotation for p in wrapper.__signature__.parameters.values()}
    del wrapper.__wrapped__
    return wrapper


projection_options = scenario_options
