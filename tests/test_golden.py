"""The same output, byte for byte, for the commands of tests/golden_cases.py."""

import pytest
from golden_cases import CASES, GOLDEN, run


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_unchanged(name, tmp_path):
    want = (GOLDEN / f"{name}.txt").read_text()
    got = run(CASES[name], tmp_path)
    assert got == want, f"output of `perfmodel {' '.join(CASES[name])}` changed; if meant, run `python tests/golden_cases.py --write`"
