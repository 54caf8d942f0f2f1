#!/usr/bin/env bash
# The newcomer's path, after the suite: build the wheel, install it (not editable) into a fresh venv, and run the
# example that ships inside it on 2 workers. A healthy run on this CPU machine: doctor says cpu-only without a
# warning, and the launch prints no TensorFlow error-level line.
set -euo pipefail
cd "$(dirname "$0")/.."
make dist
wheel=$(ls dist/tfdist-*-py3-none-any.whl)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet "${wheel}[cpu,examples]"
cd "$work"   # outside the checkout: everything comes from the installed wheel
"$work/venv/bin/tfdist" doctor --json > doctor.json || true
"$work/venv/bin/python" - <<'PY'
import json, sys
report = json.load(open("doctor.json"))
noisy = [f["id"] for f in report["findings"] if f["severity"] not in ("info",)]
print(f"wheel-smoke: doctor verdict {report['verdict']}, findings above info: {noisy or 'none'}")
sys.exit(0 if report["verdict"] == "cpu-only" and not noisy else 1)
PY
"$work/venv/bin/tfdist" launch -n 2 -m tfdist.examples.digits --epochs 2 --model-dir "$work/model" > launch.out 2>&1
cat launch.out
grep -q '^\[worker:0\] final_accuracy=' launch.out
if grep -E '^\[[a-z]+:[0-9]+\] [EF][0-9]{4} ' launch.out; then echo "wheel-smoke: TensorFlow error lines above" >&2; exit 1; fi
echo "wheel-smoke: the wheel installs and runs the example ($(wc -l < launch.out) lines)"
