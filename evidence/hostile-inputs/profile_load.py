"""Time load_profile on the embedded profile, here and in another checkout (argv[1]), in fresh
processes, interleaved; prints each run's median of 20 reads."""

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CODE = """
import time, perfmodel
from perfmodel.request import embedded_profile_path
from perfmodel.profile import load_profile
p = embedded_profile_path()
load_profile(p)
ts = []
for _ in range(20):
    t = time.perf_counter(); load_profile(p); ts.append(time.perf_counter() - t)
ts.sort()
print(perfmodel.__file__, ts[len(ts) // 2] * 1e3)
"""

here = str(Path(__file__).resolve().parents[2])
other = sys.argv[1]
roots = {"this checkout": here, "the other checkout": other}
res: dict[str, list[float]] = {name: [] for name in roots}
for _ in range(5):
    for name, root in roots.items():
        out = subprocess.run([sys.executable, "-c", CODE], env={"PYTHONPATH": root}, cwd=tempfile.gettempdir(), capture_output=True,
                             text=True,
                             check=True).stdout.split()
        assert Path(out[0]).resolve().is_relative_to(Path(root).resolve()), (out[0], root)  # that checkout's code ran
        print(f"{name}: median {float(out[1]):.1f} ms")
        res[name].append(float(out[1]))
for name, v in res.items():
    print(f"{name}: median of the runs' medians {statistics.median(v):.1f} ms")
