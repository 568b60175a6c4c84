"""Mutation testing of the model, validate and the fits: does a wrong formula fail a test?

Why not mutmut: mutmut 3 names a mutant by its file path ("measure.fits") but the code runs as
`perfmodel.measure.fits` (pyproject's package-dir), so its mutants of measure/fits.py never
switch on. This script is small and does the same job honestly:

  1. copies the tracked tree to a scratch folder (the package-dir folders linked under
     perfmodel/ so the copy imports on its own) and never touches your worktree;
  2. runs the chosen tests once with a line tracer, to learn which tests execute each line
     of the mutated files (and how long each test takes); a line run by a shared (module- or
     wider-scoped) fixture counts for every test that uses the fixture, not only the first;
  3. for every mutation site (below), writes the mutated file into the copy and runs only
     the tests that execute that line, fastest first, with `-x`, in a forked child of a
     process that has already imported the third-party libraries (one mutant at a time);
  4. records killed / survived / timeout per mutant, with the first failing test.

Mutation operators, one change per mutant (inside functions and module-level constants;
never in docstrings, strings, f-strings, `raise` or `assert` statements):
  arithmetic   + <-> -, * <-> /, // -> /, ** -> *, % -> *   (also in augmented assignments)
  comparison   < -> <=, <= -> <, > -> >=, >= -> >, == <-> !=, in <-> not in, is <-> is not
  boolean      and <-> or, `not x` -> x, True <-> False
  unary minus  -x -> x
  constants    integer n -> n + 1, float x -> x + 1 (as mutmut)
  calls        max <-> min, math.ceil <-> math.floor
  statements   an augmented assignment or a bare call (e.g. `ops.append(...)`) removed

Score = killed / (mutants - equivalent), where tests/mutation/equivalent.txt lists the
surviving mutants judged equivalent (same behaviour for every input the code can get), each
with its reason. Run (one worker; about 20-40 min for all files on one core):

    .venv/bin/python tests/mutation/mutate.py                       # all target files
    .venv/bin/python tests/mutation/mutate.py perfmodel/model/step.py --out /tmp/step.json
    .venv/bin/python tests/mutation/mutate.py --list perfmodel/model/ops.py   # sites only
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGETS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "perfmodel" / "model").glob("*.py")) + [
    "perfmodel/validate.py", "measure/fits.py"]
# Every non-GPU test except the change detectors (the README anchors block and the committed
# example reports, regenerated on purpose; the pinned unsourced assumptions of derived.py) and
# the kernel checks (Triton interpreter runs; they do not execute the mutated files).
EXCLUDED_TESTS = {"tests/test_readme.py", "tests/test_examples.py", "tests/test_derived_assumptions_pinned.py"}
EQUIVALENT = Path(__file__).with_name("equivalent.txt")
PACKAGE_DIRS = {"measure": "measure", "kernels": "kernels", "reports": "reports", "hwspecs": "hwspecs"}

_ARITH = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
          ast.Pow: ast.Mult, ast.Mod: ast.Mult}
_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
        ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_CALLS = {"max": "min", "min": "max", "ceil": "floor", "floor": "ceil"}


def _runs_triton_kernels(p: Path) -> bool:
    """A kernel test: it runs the Triton kernels (in the interpreter), not the mutated files."""
    text = p.read_text()
    return p.name.startswith("test_kernel_") and any(
        m in text for m in ("TRITON_INTERPRET", "import triton", "from kernels", "perfmodel.kernels"))


def default_tests() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "tests").glob("test_*.py"))
            if str(p.relative_to(ROOT)) not in EXCLUDED_TESTS and not _runs_triton_kernels(p)]


# ----------------------------------------------------------------------------- sites
class _Sites(ast.NodeVisitor):
    """Collects (path-to-node, kind, description) for every mutation site."""

    def __init__(self, source: str):
        self.src = source.splitlines()
        self.sites: list[dict] = []
        self.func: list[str] = []
        self.in_body = 0  # >0 inside a function body (lines covered per test); else module level
        # Where a site outside function bodies takes effect (it runs at import, before any test):
        # the names a module-level statement binds, or the function / class a default belongs to.
        self.where: dict = {}

    def _add(self, node, kind: str, desc: str) -> None:
        line = self.src[node.lineno - 1].strip()
        self.sites.append({"node": node, "kind": kind, "desc": desc, "line": node.lineno, "col": node.col_offset,
                           "end": (node.end_lineno, node.end_col_offset), "node_type": type(node).__name__,
                           "func": ".".join(self.func) or "<module>", "text": line,
                           "lines": list(range(node.lineno, (node.end_lineno or node.lineno) + 1)),
                           "module_level": self.in_body == 0, "where": dict(self.where)})

    # skipped regions
    def visit_Raise(self, node):
        pass

    def visit_Assert(self, node):
        pass

    def visit_JoinedStr(self, node):
        pass

    def visit_AnnAssign(self, node):  # the annotation is not code; the value is
        if node.value is not None:
            self.visit(node.value)

    def visit_arg(self, node):
        pass

    def _visit_func(self, node):
        for d in node.decorator_list:
            self.visit(d)
        outer = self.where
        if not self.in_body:  # defaults take effect when the function runs
            self.where = {"lines": [_first_body_line(node)]}
        self.visit(node.args)
        self.where = outer
        self.func.append(node.name)
        self.in_body += 1
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        for st in body:
            self.visit(st)
        self.in_body -= 1
        self.func.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _visit_func

    def visit_ClassDef(self, node):
        outer = self.where
        if not self.in_body:  # field defaults: wherever the class is built or its methods run
            self.where = {"names": [node.name],
                          "lines": [_first_body_line(f) for f in node.body if isinstance(f, ast.FunctionDef)]}
        self.func.append(node.name)
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        for st in body:
            self.visit(st)
        self.func.pop()
        self.where = outer

    def visit_Module(self, node):
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        for st in body:
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in st.targets):
                continue
            targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) else []
            self.where = {"names": [t.id for t in targets if isinstance(t, ast.Name)]}
            self.visit(st)
            self.where = {}

    # sites
    def visit_BinOp(self, node):
        if type(node.op) in _ARITH:
            self._add(node, "binop", f"{type(node.op).__name__}->{_ARITH[type(node.op)].__name__}")
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        if type(node.op) in _ARITH:
            self._add(node, "augop", f"{type(node.op).__name__}=->{_ARITH[type(node.op)].__name__}=")
        self._add(node, "drop", "statement removed")
        self.generic_visit(node)

    def visit_Compare(self, node):
        for i, op in enumerate(node.ops):
            if type(op) in _CMP:
                self._add(node, f"cmp{i}", f"{type(op).__name__}->{_CMP[type(op)].__name__}")
        self.generic_visit(node)

    def visit_BoolOp(self, node):
        self._add(node, "boolop", "And->Or" if isinstance(node.op, ast.And) else "Or->And")
        self.generic_visit(node)

    def visit_UnaryOp(self, node):
        if isinstance(node.op, ast.Not):
            self._add(node, "unary", "not x->x")
        elif isinstance(node.op, ast.USub):
            self._add(node, "unary", "-x->x")
        self.generic_visit(node)

    def visit_Constant(self, node):
        v = node.value
        if isinstance(v, bool):
            self._add(node, "const", f"{v}->{not v}")
        elif isinstance(v, int):
            self._add(node, "const", f"{v}->{v + 1}")
        elif isinstance(v, float):
            self._add(node, "const", f"{v!r}->{v + 1!r}")

    def visit_Call(self, node):
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name in _CALLS and (isinstance(f, ast.Name) or (isinstance(f.value, ast.Name) and f.value.id == "math")):
            self._add(node, "call", f"{name}->{_CALLS[name]}")
        self.generic_visit(node)

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Call) and self.in_body:
            self._add(node, "drop", "call statement removed")
        self.generic_visit(node)


def _first_body_line(func) -> int:
    body = func.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return body[0].lineno


def name_uses(files: list[str]) -> dict[str, list[tuple[str, int]]]:
    """Where each name is read, over the mutated files: {name: [(file, line)]}."""
    uses: dict[str, list[tuple[str, int]]] = {}
    for f in files:
        for node in ast.walk(ast.parse((ROOT / f).read_text())):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                uses.setdefault(node.id, []).append((f, node.lineno))
            elif isinstance(node, ast.Attribute):
                uses.setdefault(node.attr, []).append((f, node.lineno))
    return uses


def sites(source: str) -> list[dict]:
    v = _Sites(source)
    v.visit(ast.parse(source))
    for i, s in enumerate(v.sites):
        s["index"] = i
    return v.sites


class _Apply(ast.NodeTransformer):
    def __init__(self, target: dict):
        self.t = target
        self.count = -1

    def generic_visit(self, node):
        return super().generic_visit(node)

    def visit(self, node):
        # Site identity: the index-th site as enumerated in the same order (node identity is
        # lost by deepcopy, so match by position, kind and line).
        t = self.t
        if getattr(node, "lineno", None) == t["line"] and getattr(node, "col_offset", None) == t["col"] \
                and (node.end_lineno, node.end_col_offset) == tuple(t["end"]) and type(node).__name__ == t["node_type"]:
            new = _mutate(node, t)
            if new is not None:
                return new
        return super().visit(node)


def _mutate(node, t):
    k = t["kind"]
    if k == "binop" and isinstance(node, ast.BinOp):
        node.op = _ARITH[type(node.op)]()
    elif k == "augop" and isinstance(node, ast.AugAssign):
        node.op = _ARITH[type(node.op)]()
    elif k == "drop" and isinstance(node, (ast.AugAssign, ast.Expr)):
        return ast.Pass()
    elif k.startswith("cmp") and isinstance(node, ast.Compare):
        i = int(k[3:])
        node.ops[i] = _CMP[type(node.ops[i])]()
    elif k == "boolop" and isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif k == "unary" and isinstance(node, ast.UnaryOp):
        return node.operand
    elif k == "const" and isinstance(node, ast.Constant):
        v = node.value
        node.value = (not v) if isinstance(v, bool) else v + 1
    elif k == "call" and isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name):
            f.id = _CALLS[f.id]
        else:
            f.attr = _CALLS[f.attr]
    else:
        return None
    return node


def mutated_source(source: str, site: dict) -> str:
    tree = ast.parse(source)
    new = _Apply(site).visit(tree)
    ast.fix_missing_locations(new)
    return ast.unparse(new) + "\n"


def mutant_key(file: str, s: dict) -> str:
    """Stable across line shifts: file, function, change, and the source line's text."""
    return f"{file}::{s['func']}::{s['desc']}::{s['text']}"


# ----------------------------------------------------------------------------- scratch tree
def scratch_copy() -> Path:
    dst = Path(tempfile.mkdtemp(prefix="perfmodel-mutate-"))
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / f)
    for name, folder in PACKAGE_DIRS.items():  # pyproject package-dir: perfmodel.<name> is <folder>/
        link = dst / "perfmodel" / name
        if not link.exists():
            link.symlink_to(Path("..") / folder)
    return dst


# ----------------------------------------------------------------------------- runner
def _child_pytest(tree: Path, args: list[str], first_failure: str) -> int:
    os.chdir(tree)
    sys.path.insert(0, str(tree))
    sys.dont_write_bytecode = True
    import pytest

    class _First:
        def pytest_runtest_logreport(self, report):
            if report.failed:
                Path(first_failure).write_text(report.nodeid)

    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the tests need no third-party plugin
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    return int(pytest.main(["-q", "-p", "no:cacheprovider", "-x", *args], plugins=[_First()]))


def run_forked(fn, timeout: float) -> tuple[str, int | None]:
    pid = os.fork()
    if pid == 0:
        try:
            code = fn()
        except BaseException:
            import traceback

            traceback.print_exc(file=sys.__stderr__)
            code = 3
        os._exit(code)
    t_end = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "done", os.waitstatus_to_exitcode(status)
        if time.monotonic() > t_end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", None
        time.sleep(0.02)


def coverage_map(tree: Path, tests: list[str], targets: list[str]) -> tuple[dict, dict, dict]:
    """{(file, line): [test ids]}, {test id: seconds} and {(file, line): [test ids]} of the lines
    a shared fixture ran (see `with_fixture_sharers`), from one traced run of the tests."""
    out = tree / ".mutate-coverage.json"
    files = {str((tree / t).resolve()): t for t in targets}

    def child():
        os.chdir(tree)
        sys.path.insert(0, str(tree))
        sys.dont_write_bytecode = True
        import pytest

        cov: dict[str, set] = {}
        durations: dict[str, float] = {}
        state = {"test": None, "setup": False}
        in_setup: dict[str, set] = {}  # lines run while a test's fixtures were set up
        shared: dict[str, list[str]] = {}  # test id -> the project fixtures it shares beyond itself

        def local(frame, event, arg):
            if event == "line" and state["test"]:
                key = f"{files[frame.f_code.co_filename]}:{frame.f_lineno}"
                cov.setdefault(key, set()).add(state["test"])
                if state["setup"]:
                    in_setup.setdefault(key, set()).add(state["test"])
            return local

        def glob(frame, event, arg):
            if frame.f_code.co_filename in files:
                return local
            return None

        class _Map:
            def pytest_runtest_setup(self, item):
                state["test"] = item.nodeid
                state["setup"] = True
                info = getattr(item, "_fixtureinfo", None)
                keys = []
                for name, defs in (info.name2fixturedefs.items() if info else ()):
                    d = defs[-1]
                    if d.baseid and d.scope != "function":  # a project fixture run once for many tests
                        where = item.nodeid.split("::")[0] if d.scope in ("module", "class") else ""
                        keys.append(f"{where}::{d.baseid}::{name}")
                shared[item.nodeid] = keys

            def pytest_runtest_call(self, item):
                state["setup"] = False

            def pytest_runtest_logreport(self, report):
                rep = report
                durations[rep.nodeid] = durations.get(rep.nodeid, 0.0) + rep.duration
                if rep.when == "call" and rep.failed:
                    durations["__failed__"] = 1.0

        import threading

        threading.settrace(glob)
        sys.settrace(glob)
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        code = pytest.main(["-q", "-p", "no:cacheprovider", *tests], plugins=[_Map()])
        sys.settrace(None)
        # file names resolved through the package-dir links
        out.write_text(json.dumps({"cov": {k: sorted(v) for k, v in cov.items()}, "durations": durations,
                                   "in_setup": {k: sorted(v) for k, v in in_setup.items()}, "shared": shared}))
        return int(code)

    # the traced files are reached through perfmodel/<pkg> links: resolve both spellings
    for name, folder in PACKAGE_DIRS.items():
        for t in list(files.values()):
            if t.startswith(folder + "/"):
                files[str(tree / "perfmodel" / name / t[len(folder) + 1:])] = t
    state, code = run_forked(child, 3600)
    if state != "done" or code != 0:
        sys.exit(f"baseline test run failed (exit {code}): fix the tests first")
    d = json.loads(out.read_text())
    # A fixture scoped wider than a test runs its lines once, in the setup of the first test
    # that asks for it: every test sharing that fixture executes those lines too.
    sharers: dict[str, set] = {}
    for t, keys in d["shared"].items():
        for k in keys:
            sharers.setdefault(k, set()).add(t)
    setup_cov = {line: sorted({s for t in ts for k in d["shared"].get(t, ()) for s in sharers[k]})
                 for line, ts in d["in_setup"].items()}
    return d["cov"], d["durations"], setup_cov


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", default=TARGETS, help="files to mutate (default: all targets)")
    ap.add_argument("--tests", nargs="*", default=None, help="test files (default: all but README/kernel tests)")
    ap.add_argument("--out", default=None, help="JSON results file")
    ap.add_argument("--list", action="store_true", help="list mutation sites and exit")
    ap.add_argument("--sample", type=int, default=0, help="run only N mutants drawn uniformly at random over all "
                    "the files' sites (mutant sampling; the score is then an estimate, reported with its 95%% interval)")
    ap.add_argument("--seed", type=int, default=20, help="random seed of --sample")
    ap.add_argument("--rerun", default=None, help="earlier JSON results: run again only its survivors (the "
                    "others keep their result; valid while the mutated files are unchanged and tests only added)")
    a = ap.parse_args()
    files = [str(Path(f)) for f in a.files]
    if a.list:
        for f in files:
            for s in sites((ROOT / f).read_text()):
                print(f"{f}:{s['line']}:{s['col']} {s['desc']:<22} {s['text'][:90]}")
        return
    tests = a.tests or default_tests()
    earlier = {}
    if a.rerun:
        for r in json.loads(Path(a.rerun).read_text()):
            earlier[(r["key"], r["line"], r["col"])] = r
    equivalent = {}
    if EQUIVALENT.exists():
        for ln in EQUIVALENT.read_text().splitlines():
            if ln.strip() and not ln.startswith("#"):
                key, _, why = ln.partition("  # ")
                equivalent[key.strip()] = why.strip()
    # Import the heavy third-party libraries once: every forked child starts with them loaded.
    import numpy  # noqa: F401
    import pydantic  # noqa: F401
    import pytest  # noqa: F401
    import scipy.optimize  # noqa: F401
    import yaml  # noqa: F401
    for heavy in ("torch", "typer", "rich"):  # imported by some test modules
        try:
            __import__(heavy)
        except ImportError:
            pass
    try:
        import matplotlib  # noqa: F401
        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except ImportError:
        pass
    chosen_sites = None
    if a.sample:
        import random

        every = [(f, s["line"], s["col"], s["desc"]) for f in files for s in sites((ROOT / f).read_text())]
        chosen_sites = set(random.Random(a.seed).sample(every, min(a.sample, len(every))))
        print(f"sampling {len(chosen_sites)} of {len(every)} mutants (seed {a.seed})", flush=True)
    tree = scratch_copy()
    print(f"scratch tree {tree}; tracing {len(tests)} test files ...", flush=True)
    t0 = time.monotonic()
    cov, durations, setup_cov = coverage_map(tree, tests, files)
    print(f"baseline {time.monotonic() - t0:.0f} s", flush=True)
    all_tests = sorted((d for d in durations if "::" in d), key=durations.get)
    uses = name_uses(TARGETS)
    killers: dict[str, int] = {}
    test_text = {t: (ROOT / t).read_text() for t in tests}
    results = []
    try:
        for f in files:
            path = tree / f
            original = path.read_text()
            if chosen_sites is not None and not any(c[0] == f for c in chosen_sites):
                continue
            # The mutants are written as ast.unparse output: check that the unmutated round trip passes.
            file_tests = sorted({t for k, ts in cov.items() if k.startswith(f + ":") for t in ts},
                                key=lambda t: durations.get(t, 0.0))
            path.write_text(ast.unparse(ast.parse(original)) + "\n")
            # (the 20 fastest tests of the file: an unparse fault breaks them all)
            st, code = run_forked(lambda: _child_pytest(tree, (file_tests or all_tests)[:20], str(tree / ".noop")), 3600)
            path.write_text(original)
            if st != "done" or code != 0:
                sys.exit(f"{f}: the unparsed (unmutated) file fails its tests (exit {code}); cannot mutate it")
            todo = [s for s in sites(original)
                    if chosen_sites is None or (f, s["line"], s["col"], s["desc"]) in chosen_sites]
            if not todo:
                continue
            for s in todo:
                key = mutant_key(f, s)
                if s["module_level"]:
                    w = s["where"]
                    where = [(f, ln) for ln in w.get("lines", [])]
                    for name in w.get("names", []):
                        where += uses.get(name, [])
                    ids = {t for (ff, ln) in where for t in cov.get(f"{ff}:{ln}", []) + setup_cov.get(f"{ff}:{ln}", [])}
                    # and every test of a test file that names it (a test may read a table directly)
                    ids |= {t for t in all_tests for name in w.get("names", []) if name in test_text[t.split("::")[0]]}
                    chosen = sorted(ids, key=lambda t: durations.get(t, 0.0)) if where else all_tests
                else:
                    ids = set()
                    for ln in s["lines"]:
                        ids.update(cov.get(f"{f}:{ln}", ()))
                        ids.update(setup_cov.get(f"{f}:{ln}", ()))
                    # tests of files that call the function by name: a cached function (lru_cache)
                    # runs its body only for the first test that calls it
                    fn = s["func"].split(".")[-1] + "("
                    ids |= {t for t in all_tests if fn in test_text[t.split("::")[0]]}
                    chosen = sorted(ids, key=lambda t: durations.get(t, 0.0))
                # tests that killed earlier mutants first (they tend to kill neighbours), then fastest
                chosen = sorted(chosen, key=lambda t: (-killers.get(t, 0), durations.get(t, 0.0)))
                rec = {"file": f, "line": s["line"], "col": s["col"], "func": s["func"], "change": s["desc"], "text": s["text"],
                       "key": key, "tests": len(chosen)}
                old = earlier.get((key, s["line"], s["col"]))
                if old and old["status"] in ("killed", "invalid") and \
                        not any(str(old.get("why", "")).startswith(x) for x in EXCLUDED_TESTS):
                    results.append(old)
                    print("k", end="", flush=True)
                    continue
                try:
                    src = mutated_source(original, {k: v for k, v in s.items() if k != "node"})
                    compile(src, f, "exec")
                except (SyntaxError, ValueError, TypeError) as e:
                    rec.update(status="invalid", why=str(e))
                    results.append(rec)
                    continue
                if src == ast.unparse(ast.parse(original)) + "\n":
                    rec.update(status="invalid", why="no change")
                    results.append(rec)
                    continue
                if not chosen:
                    rec["status"] = "survived"
                    rec["why"] = "no test executes this line"
                else:
                    path.write_text(src)
                    for pyc in path.parent.glob(f"__pycache__/{path.stem}.*.pyc"):
                        pyc.unlink()
                    report = str(tree / ".mutate-first-failure")
                    Path(report).unlink(missing_ok=True)
                    budget = 5 * sum(durations.get(t, 0.0) for t in chosen) + 60
                    st, code = run_forked(lambda: _child_pytest(tree, chosen, report), budget)
                    path.write_text(original)
                    if st == "timeout":  # counted as killed (as mutmut does), listed apart
                        rec["status"] = "killed"
                        rec["why"] = "timeout"
                    elif code in (1, 2, 3, 4):  # 4: a test module no longer imports, so its tests are "not found"
                        rec["status"] = "killed"
                        rec["why"] = Path(report).read_text() if Path(report).exists() else f"exit {code}"
                        killers[rec["why"]] = killers.get(rec["why"], 0) + 1
                    else:
                        rec["status"] = "survived"
                if rec["status"] == "survived" and key in equivalent:
                    rec["status"] = "equivalent"
                    rec["why"] = equivalent[key]
                results.append(rec)
                mark = {"killed": ".", "survived": "S", "equivalent": "e", "invalid": "i"}[rec["status"]]
                print(mark if rec.get("why") != "timeout" else "T", end="", flush=True)
            print(f"  {f}", flush=True)
            if a.out:  # after each file, so a long run can be read while it goes on
                Path(a.out).write_text(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(tree, ignore_errors=True)
    summarize(results)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))


def summarize(results: list[dict]) -> None:
    by: dict[str, dict[str, int]] = {}
    for r in results:
        by.setdefault(r["file"], {}).setdefault(r["status"], 0)
        by[r["file"]][r["status"]] += 1
    tot = {"killed": 0, "survived": 0, "equivalent": 0, "invalid": 0}
    print(f"\n{'file':<34} {'mutants':>7} {'killed':>7} {'equiv':>6} {'surv':>5} {'score':>6}")
    for f, c in by.items():
        for k in tot:
            tot[k] += c.get(k, 0)
        n = c.get("killed", 0) + c.get("survived", 0)
        print(f"{f:<34} {n + c.get('equivalent', 0):>7} {c.get('killed', 0):>7} {c.get('equivalent', 0):>6} "
              f"{c.get('survived', 0):>5} {c.get('killed', 0) / n if n else 1:>6.1%}")
    n = tot["killed"] + tot["survived"]
    print(f"{'total':<34} {n + tot['equivalent']:>7} {tot['killed']:>7} {tot['equivalent']:>6} {tot['survived']:>5} "
          f"{tot['killed'] / n if n else 1:>6.1%}")
    if n:  # Wilson 95% interval: the score's uncertainty when the mutants are a random sample
        p, z = tot["killed"] / n, 1.96
        c, h = (p + z * z / (2 * n)) / (1 + z * z / n), z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
        print(f"95% interval if sampled: {c - h:.1%} - {c + h:.1%}")
    for r in results:
        if r["status"] == "survived":
            print(f"SURVIVED {r['file']}:{r['line']} [{r['func']}] {r['change']}: {r['text'][:100]}")


if __name__ == "__main__":
    main()
