"""The same output for the commands of tests/golden_cases.py: byte for byte, but for the numbers of
a JSON output, which must agree to REL_TOL. A fit's last digits move with the numerical libraries
installed (calibrate's factors differed from the stored output in their ninth digit on a fresh
install with the code unchanged), while a change of the code's arithmetic moves them by far more."""

import json
import math

import pytest
from golden_cases import CASES, GOLDEN, run

REL_TOL = 1e-6


def _same(a, b, where: str = "$") -> str | None:
    """Where two parsed JSON values differ (a path), or None: numbers to REL_TOL, all else exactly."""
    if isinstance(a, bool) or isinstance(b, bool) or not (isinstance(a, int | float) and isinstance(b, int | float)):
        if type(a) is not type(b):
            return where
        if isinstance(a, dict):
            if a.keys() != b.keys():
                return where
            return next((w for k in a if (w := _same(a[k], b[k], f"{where}.{k}"))), None)
        if isinstance(a, list):
            if len(a) != len(b):
                return where
            return next((w for i, (x, y) in enumerate(zip(a, b)) if (w := _same(x, y, f"{where}[{i}]"))), None)
        return None if a == b else where
    return None if math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12) else where


def _parts(text: str):
    head, _, body = text.partition("\n")
    try:
        return head, json.loads(body)
    except json.JSONDecodeError:
        return head, body


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_unchanged(name, tmp_path):
    want = (GOLDEN / f"{name}.txt").read_text()
    got = run(CASES[name], tmp_path)
    (h_got, b_got), (h_want, b_want) = _parts(got), _parts(want)
    where = "exit code" if h_got != h_want else _same(b_got, b_want)
    assert where is None, (f"output of `perfmodel {' '.join(CASES[name])}` changed at {where}; if meant, run "
                           "`python tests/golden_cases.py --write`")


def test_the_comparison_tells_a_changed_number_from_a_last_digit():
    assert _same({"x": [1.0, "a", True]}, {"x": [1.0 + 1e-9, "a", True]}) is None
    assert _same({"x": [1.0, "a"]}, {"x": [1.001, "a"]}) == "$.x[0]"
    assert _same({"x": 1}, {"y": 1}) == "$"
    assert _same([True], [1]) == "$[0]"
    assert _same("a", "b") == "$"
