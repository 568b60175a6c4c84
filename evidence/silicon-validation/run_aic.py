"""aiconfigurator's own estimator on a stratified sample of the silicon rows perfmodel expresses.

    python evidence/silicon-validation/run_aic.py PER_GROUP OUT.jsonl

Rows: `perfmodel.silicon.stratified` (PER_GROUP rows per model x system x engine, evenly spaced
over concurrency) of the aggregated rows `perfmodel.silicon.express` accepts. Each row's estimate
(`perfmodel.silicon_validate.aic_estimate`: `aiconfigurator.cli.api.cli_estimate` with the
arguments aiconfigurator's accuracy tools pass) is appended as one JSON line as it comes; the
first line (starting with '#') records the command, package versions and git commit.
`perfmodel validate --silicon --aic-results OUT.jsonl` reads it back."""

import json
import subprocess
import sys
from pathlib import Path

from perfmodel import silicon
from perfmodel.silicon_validate import aic_version, run_aic

per_group, out = int(sys.argv[1]), Path(sys.argv[2])
rows = silicon.load_rows()
chosen = silicon.stratified(silicon.express_all(rows)[0], per_group, silicon.group_key)
git = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
from perfmodel.aic import package_version  # noqa: E402

out.write_text("# " + json.dumps({"command": " ".join(["python"] + sys.argv), "rows": len(chosen), "per_group": per_group,
                                  "aiconfigurator": aic_version(), "aiconfigurator_core": package_version(),
                                  "perfmodel_git": git}) + "\n")
run_aic([e.row for e in chosen], out, progress=lambda what, i, n: print(f"{what} {i + 1}/{n}", file=sys.stderr, flush=True))
