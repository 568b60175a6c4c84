#!/usr/bin/env bash
# A validate run of perfmodel's package as it stood at a given commit, for the before/after
# comparison of the InferenceX servers' settings (perfmodel/inferencex.py): the package at COMMIT
# is extracted with `git archive` into a temporary folder put first on PYTHONPATH, and the run is
# that of evidence/KIND/run.sh (KIND: silicon-validation | published-serving), its files written
# here as NAME.json, NAME.txt, NAME.meta.txt (the meta's commit line names COMMIT).
#   bash evidence/server-settings/run.sh NAME COMMIT KIND validate-options...
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
name=$1 rev=$2 kind=$3
shift 3
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
git archive "$rev" perfmodel hwspecs | tar -x -C "$root"
PYTHONPATH="$root" bash "evidence/$kind/run.sh" "../server-settings/$name" "$@"
sed -i "s/^perfmodel git commit: .*/perfmodel git commit: $(git rev-parse "$rev") (its perfmodel\/ and hwspecs\/, first on PYTHONPATH)/" \
  "evidence/server-settings/$name.meta.txt"
