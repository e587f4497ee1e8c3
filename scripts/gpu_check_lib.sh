# Sourced by scripts/gpu-smoke.sh and scripts/gpu-check.sh: the step runner, its budgets, the scratch folder.
#
# Budgets. A run has a hard limit (LIMIT_S) and plans at most 85% of it (PLANNED_S, the sum of its
# `step` budgets, which the script declares and tests/bench/test_gpu_check.py checks): the rest is the
# reserve for start-up, the gather and the unforeseen. A step may run until the planned time handed out
# so far is spent (its own budget plus whatever earlier steps left unused), never into the reserve.
# An `extra` step runs only when the unused planned time still covers its whole budget.
#
# Output. Every step writes into the scratch folder ($SCRATCH: its stdout, its stderr, run dirs, caches,
# the installed wheels). Each figure line a step prints ({"figure": ...}, flushed) is shown at once and
# appended to $OUT/figures.txt as it comes, so a run cut short keeps what it measured; at the end
# scripts/gpu_check.py replaces that with the compact $OUT/summary.json and $OUT/figures.txt, the only
# outputs. GPU_CHECK_CPU=1 runs every step CPU-sized with wide limits: a test that the steps run, not of
# how long they take.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
rm -f "$OUT/summary.json" "$OUT/figures.txt"
SCRATCH=${SCRATCH:-$(mktemp -d "${TMPDIR:-/tmp}/rubin-gpu-check.XXXXXX")}
mkdir -p "$SCRATCH"
: > "$SCRATCH/steps.tsv"
: > "$SCRATCH/figures.jsonl"
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
WHEELS=${WHEELS:-.whl}
CPU=${GPU_CHECK_CPU:-0}
# the carried wheels (scripts/gpu-wheels.sh) are installed here, outside the image's environment
export PYTHONPATH="$PWD/src:$SCRATCH/site${PYTHONPATH:+:$PYTHONPATH}"
# torch.cuda.is_available() through NVML: no CUDA context in processes that only ask
export PYTORCH_NVML_BASED_CUDA_CHECK=1
export PYTHONUNBUFFERED=1
START=$(date +%s)
HANDED=0  # planned seconds handed out so far
if [ "$CPU" = 1 ]; then DEV=cpu; else DEV=cuda; fi
echo "gpu check: scratch $SCRATCH, outputs $OUT" >&2

elapsed() { echo $(( $(date +%s) - START )); }
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "${6:-}" >> "$SCRATCH/steps.tsv"; }

# run NAME BUDGET LIMIT CMD...: CMD with stdout to $SCRATCH/NAME (its figure lines shown and kept as they come)
run() {
  local name=$1 budget=$2 limit=$3; shift 3
  local t0; t0=$(date +%s)
  # through bash -c: timeout runs programs, and some steps are this script's functions (exported)
  { timeout --kill-after=5 "$limit" bash -c '"$@"' "$name" "$@" 2> "$SCRATCH/$name.stderr"; echo $? > "$SCRATCH/$name.rc"; } \
    | tee "$SCRATCH/$name" | grep --line-buffered '^{"figure"' | tee -a "$SCRATCH/figures.jsonl" "$OUT/figures.txt"
  "$PY" scripts/gpu_check.py derive "$SCRATCH/$name" | tee -a "$SCRATCH/figures.jsonl" "$OUT/figures.txt"
  local rc; rc=$(cat "$SCRATCH/$name.rc")
  local secs=$(( $(date +%s) - t0 )) status=ok
  [ "$rc" -ne 0 ] && status=failed
  { [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; } && status=timeout
  record "$name" "$status" "$secs" "$budget" "$limit" "exit $rc"
  echo "$status $name ($secs s of $limit s)" >&2
}

# step NAME BUDGET CMD...: a planned step; its limit is the planned time not yet spent
step() {
  local name=$1 budget=$2; shift 2
  HANDED=$(( HANDED + budget ))
  local limit=$(( HANDED - $(elapsed) ))
  [ "$CPU" = 1 ] && limit=$(( budget * 6 > 180 ? budget * 6 : 180 ))  # CPU-sized: a safety net only
  if [ "$limit" -lt 2 ]; then
    record "$name" timeout 0 "$budget" 0 "no planned time left"; echo "timeout $name (no planned time left)" >&2; return
  fi
  run "$name" "$budget" "$limit" "$@"
}

# extra NAME BUDGET CMD...: runs only when the planned time left covers BUDGET (always CPU-sized)
extra() {
  local name=$1 budget=$2; shift 2
  local left=$(( PLANNED_S - $(elapsed) ))
  if [ "$CPU" != 1 ] && [ "$left" -lt "$budget" ]; then
    record "$name" skipped 0 "$budget" 0 "extra: $left s of planned time left, it needs $budget s"
    echo "skip  $name (extra: $left s left, needs $budget s)" >&2; return
  fi
  local limit=$left
  [ "$CPU" = 1 ] && limit=$(( budget * 6 > 180 ? budget * 6 : 180 ))
  run "$name" "$budget" "$limit" "$@"
}

# needs FILE KIND NAME BUDGET CMD...: the step (KIND: step or extra) when FILE exists, else skipped with the reason
needs() {
  local file=$1 kind=$2 name=$3 budget=$4; shift 4
  if [ ! -e "$file" ]; then
    [ "$kind" = step ] && HANDED=$(( HANDED + budget ))
    record "$name" skipped 0 "$budget" 0 "missing $file"; echo "skip  $name (missing $file)" >&2; return
  fi
  "$kind" "$name" "$budget" "$@"
}

# The carried wheels, into the scratch folder: never over the image's own packages, without
# byte-compiling (about 900 .py files), into a temporary folder renamed when complete (a killed
# install leaves nothing half there). Then the imports that need them, timed as one figure each.
install_wheels() {
  local t0 t1 t2
  t0=$(date +%s.%N)
  rm -rf "$SCRATCH/site.tmp"
  "$PY" -m pip install --quiet --no-index --no-deps --no-compile --target "$SCRATCH/site.tmp" "$WHEELS"/*.whl || return 1
  mv "$SCRATCH/site.tmp" "$SCRATCH/site"
  t1=$(date +%s.%N)
  "$PY" -c "import pydantic, torchao.float8, rubin.train.config" || return 1
  t2=$(date +%s.%N)
  "$PY" - "$t0" "$t1" "$t2" <<'EOF'
import json, sys
t0, t1, t2 = map(float, sys.argv[1:])
print(json.dumps({"figure": "wheels install (--no-deps --no-compile --target)", "value": round(t1 - t0, 2), "unit": "s",
                  "target": "<= 5", "kind": "gap", "ok": t1 - t0 <= 5}), flush=True)
print(json.dumps({"figure": "wheels import (pydantic, torchao.float8, rubin's config)", "value": round(t2 - t1, 2),
                  "unit": "s", "target": "imports", "kind": "check", "ok": True}), flush=True)
EOF
}

# rubin train with a summary into $SCRATCH/NAME.json, then its figures (gpu_check.py train): LABEL FLAGS -- ARGS
train_step() {
  local label=$1 file=$2; shift 2
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  "$PY" -m rubin train --quiet --json "$@" > "$file"
  local rc=$?
  "$PY" scripts/gpu_check.py train "$file" --label "$label" "${flags[@]}"
  return $rc
}

finish() {
  local run=$1 total; total=$(elapsed)
  echo "total $total s of $LIMIT_S s ($PLANNED_S s planned)" >&2
  "$PY" scripts/gpu_check.py gather "$SCRATCH" "$OUT" --run "$run" --limit "$LIMIT_S" --planned "$PLANNED_S" --total "$total"
}

export OUT PY WHEELS SCRATCH DEV CPU
export -f install_wheels train_step
