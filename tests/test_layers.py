"""ARCHITECTURE.md's import table, read from the source (AST): every import, lazy ones inside
functions included, against what its layer may import; and no import cycle among perfmodel's
modules."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# folder on disk -> import name (pyproject.toml's package-dir)
FOLDERS = {"perfmodel": "perfmodel", "kernels": "perfmodel.kernels", "measure": "perfmodel.measure",
           "reports": "perfmodel.reports", "hwspecs": "perfmodel.hwspecs"}
STDLIB_OK = None  # any standard-library module

# layer prefix -> (perfmodel modules it may import, third-party roots it may import). A module
# takes the rule of its longest matching prefix.
CORE_TYPES = ("perfmodel.errors", "perfmodel.specs.schema", "perfmodel.profile", "perfmodel.kernel_classes",
              "perfmodel.collective_math", "perfmodel.scenario", "perfmodel.calibration_schema", "perfmodel.inputs",
              "perfmodel.outputs")
RULES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "perfmodel.errors": ((), ()),
    "perfmodel.collective_math": ((), ()),
    "perfmodel.kernel_classes": ((), ()),
    "perfmodel.inputs": (("perfmodel.errors",), ("yaml", "pydantic")),  # the one reader of user files
    "perfmodel.outputs": (("perfmodel.inputs", "perfmodel.errors"), ()),  # every file written, and stdout
    "perfmodel.specs": (("perfmodel.specs", "perfmodel.inputs", "perfmodel.errors"), ("pydantic", "yaml")),
    "perfmodel.profile": (("perfmodel.inputs", "perfmodel.outputs", "perfmodel.kernel_classes", "perfmodel.errors"),
                          ("pydantic",)),
    "perfmodel.scenario": (("perfmodel.errors", "perfmodel.profile", "perfmodel.specs.schema"), ("pydantic",)),
    "perfmodel.calibration_schema": (("perfmodel.scenario", "perfmodel.profile"), ("pydantic",)),
    # the core: arithmetic over typed inputs; no file readers, no registry, nothing above it
    "perfmodel.model": (("perfmodel.model",) + tuple(m for m in CORE_TYPES if m not in ("perfmodel.inputs", "perfmodel.outputs")),
                        ("numpy", "pydantic")),
    "perfmodel.request": (("perfmodel.model", "perfmodel.specs") + CORE_TYPES, ("pydantic", "yaml")),
    "perfmodel.calibrate": (("perfmodel.model", "perfmodel.request") + CORE_TYPES, ("numpy", "scipy", "pydantic", "yaml")),
    "perfmodel.api": (("perfmodel.model", "perfmodel.request", "perfmodel.calibrate", "perfmodel.specs") + CORE_TYPES, ()),
    "perfmodel.explore": (("perfmodel.api", "perfmodel.model") + CORE_TYPES, ()),
    "perfmodel.compare": (("perfmodel.api", "perfmodel.model", "perfmodel.specs") + CORE_TYPES, ("matplotlib", "numpy", "pydantic")),
    "perfmodel.validate": (("perfmodel.api", "perfmodel.model", "perfmodel.request", "perfmodel.calibrate", "perfmodel.specs")
                           + CORE_TYPES, ("yaml",)),
    "perfmodel.render": (("perfmodel.model",) + CORE_TYPES, ("rich",)),
    # the edge that reads aiconfigurator's database (pyarrow; CSV fixtures) and fits its rows with measure's fits
    "perfmodel.aic": (("perfmodel.model", "perfmodel.specs", "perfmodel.measure.fits") + CORE_TYPES, ("yaml", "pyarrow")),
    "perfmodel.transfer": (("perfmodel.aic", "perfmodel.model", "perfmodel.request", "perfmodel.specs") + CORE_TYPES, ()),
    # aiconfigurator's measured serving points: rows -> requests, and validate --silicon over the api
    "perfmodel.silicon": (("perfmodel.aic", "perfmodel.model", "perfmodel.specs", "perfmodel.inferencex") + CORE_TYPES, ()),
    # the server settings of InferenceX's benchmark scripts, per run (pure)
    "perfmodel.inferencex": (("perfmodel.scenario",), ()),
    "perfmodel.silicon_validate": (("perfmodel.silicon", "perfmodel.aic", "perfmodel.api", "perfmodel.request") + CORE_TYPES,
                                   ("numpy", "aiconfigurator")),
    # published serving points: records -> observed points, priced as validate --silicon prices
    "perfmodel.published_serving": (("perfmodel.silicon", "perfmodel.silicon_validate", "perfmodel.inferencex") + CORE_TYPES,
                                    ("pydantic",)),
    "perfmodel.options": (("perfmodel.scenario", "perfmodel.errors"), ("typer",)),
    "perfmodel.cli_errors": ((), ("typer", "click")),
    "perfmodel.cli": (("perfmodel",), ("typer", "rich")),  # the edge: everything, lazily
    "perfmodel.__main__": (("perfmodel.cli",), ()),
    "perfmodel.reports": (("perfmodel.reports", "perfmodel.api", "perfmodel.explore", "perfmodel.model", "perfmodel.request",
                           "perfmodel.validate", "perfmodel.calibrate", "perfmodel.specs") + CORE_TYPES,
                          ("matplotlib", "numpy", "yaml")),
    "perfmodel.kernels": (("perfmodel.kernels",), ("torch", "triton", "numpy")),
    # measurement talks to the model only through profile files
    "perfmodel.measure": (("perfmodel.measure", "perfmodel.kernels", "perfmodel.profile", "perfmodel.specs",
                           "perfmodel.collective_math", "perfmodel.kernel_classes", "perfmodel.inputs", "perfmodel.outputs",
                           "perfmodel.errors"),
                          ("torch", "triton", "numpy", "scipy", "pydantic", "yaml", "rich", "pynvml")),
    "perfmodel": (("perfmodel.api", "perfmodel.model", "perfmodel.scenario", "perfmodel.errors"), ()),  # __init__'s lazy names
}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, pkg in FOLDERS.items():
        for f in (ROOT / folder).rglob("*.py"):
            parts = [p for p in f.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            if folder == "perfmodel" and parts and parts[0] in ("kernels", "measure", "reports"):
                continue
            out[".".join([pkg, *parts])] = f
    return out


def _imports(name: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom):
            base = n.module or ""
            if n.level:
                parent = pkg.split(".")[: len(pkg.split(".")) - n.level + 1]
                base = ".".join(parent + ([n.module] if n.module else []))
            out.add(base)
            out |= {f"{base}.{a.name}" for a in n.names}
    return out


def _rule(name: str):
    best = max((p for p in RULES if name == p or name.startswith(p + ".")), key=len)
    return RULES[best]


def _allowed(target: str, allowed: tuple[str, ...]) -> bool:
    return any(target == a or target.startswith(a + ".") for a in allowed)


def test_every_import_is_allowed_by_its_layer():
    import sys

    mods = _modules()
    bad: list[str] = []
    for name, path in sorted(mods.items()):
        ours, third = _rule(name)
        for imp in sorted(_imports(name, path)):
            root = imp.split(".")[0]
            if root == "perfmodel":
                if imp in mods or imp.rpartition(".")[0] in mods:  # a module, or a name from one
                    mod = imp if imp in mods else imp.rpartition(".")[0]
                    if mod != name and not _allowed(mod, ours) and mod != "perfmodel":
                        bad.append(f"{name} imports {mod}")
            elif root in sys.stdlib_module_names or root == "__future__":
                continue
            elif root not in third:
                bad.append(f"{name} imports {root} (third-party)")
    bad = sorted(set(bad))
    assert not bad, "imports outside ARCHITECTURE.md's table:\n" + "\n".join(bad)


def test_no_import_cycles():
    mods = _modules()
    edges = {}
    for name, path in mods.items():
        edges[name] = {m for m in (imp if imp in mods else imp.rpartition(".")[0] for imp in _imports(name, path))
                       if m in mods and m != name and m != "perfmodel"}
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(mods):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_wheel_ships_no_tool():
    text = (ROOT / "pyproject.toml").read_text()
    assert "tuning" not in text and "tools" not in text.split("[tool.setuptools]")[1].split("[tool.setuptools.package-data]")[0]


# Parser and reader calls outside perfmodel.inputs, each with why it reads no user file.
# (module, call) -> reason
OWN_READERS = {
    ("perfmodel.model.acceptance", "json.loads"): "an acceptance file's text, checked by the edge's parse_json first",
    ("perfmodel.specs.registry", "read_text"): "the shipped specs (package data)",
    ("perfmodel.validate", "read_text"): "the shipped published.yaml (package data)",
    ("perfmodel.request", "read_text"): "the shipped production_floors.yaml (package data)",
    ("perfmodel.aic", "open"): "aiconfigurator's installed database (package data of that package)",
    ("perfmodel.aic", "yaml.safe_load"): "aiconfigurator's installed database (package data of that package)",
    ("perfmodel.aic", "read_text"): "aiconfigurator's installed database (package data of that package)",
    ("perfmodel.reports.anchors", "read_text"): "README.md and docs/kernels.md of the repository (a development tool)",
    ("perfmodel.reports.anchors", "json.loads"): "the repository's committed evidence runs it tabulates (a development tool)",
    ("perfmodel.published_serving", "read_text"): "the shipped published_serving.yaml (package data)",
    ("perfmodel.silicon", "read_text"): "aiconfigurator's installed silicon sample (package data of that package)",
    ("perfmodel.measure.collectives", "json.loads"): "the result file of its own child process",
    ("perfmodel.measure.collectives", "read_text"): "the result file of its own child process",
    ("perfmodel.measure.foreign", "json.loads"): "the result file of its own child process",
    ("perfmodel.measure.foreign", "read_text"): "the result file of its own child process",
    ("perfmodel.reports.writer", "read_bytes"): "its own staged files, and regular files it wrote itself (is_file first)",
    ("perfmodel.kernels._offline", "open"): "writes a kernel's source for an offline compile",
}


def _reader_calls(path: Path) -> set[str]:
    out = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if not isinstance(n, ast.Call):
            continue
        f = n.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("json", "yaml") \
                and f.attr in ("load", "loads", "safe_load", "load_all", "safe_load_all", "full_load", "unsafe_load"):
            out.add(f"{f.value.id}.{f.attr}")
        elif isinstance(f, ast.Attribute) and f.attr in ("read_text", "read_bytes"):
            out.add(f.attr)
        elif isinstance(f, ast.Name) and f.id == "open":
            out.add("open")
    return out


def test_user_files_are_read_only_through_the_input_layer():
    """No parser or file read outside perfmodel.inputs (and the output layer), but the listed
    readers of files the user does not give."""
    found = set()
    for name, path in _modules().items():
        if name in ("perfmodel.inputs", "perfmodel.outputs"):
            continue
        found |= {(name, c) for c in _reader_calls(path)}
    assert found - set(OWN_READERS) == set(), "read these through perfmodel.inputs (load_json, load_yaml, read_text)"
    assert set(OWN_READERS) - found == set(), "no longer read: remove from OWN_READERS"
