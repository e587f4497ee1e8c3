#!/usr/bin/env bash
# On a GPU machine: every GPU figure rubin quotes, and the gpu-marked tests, in one run of at most 420 s.
#
#   bash scripts/gpu-wheels.sh                      # first, on a machine with a package index: fills .whl/
#   bash scripts/gpu-check.sh                       # on the GPU node (installs .whl/ with --no-index)
#   GPU_CHECK_CPU=1 bash scripts/gpu-check.sh       # the same steps, CPU-sized: a test of the script itself
#
# Each step has its own time budget (the budgets sum to 415 s; the run's whole budget is BUDGET_S, 415 by
# default). A step's stdout goes to $OUT/NAME, its stderr to $OUT/NAME.stderr, and a line to steps.tsv
# (name, status, seconds, budget, note). A step whose file is missing is "skipped" with the reason, not failed.
# Figures are JSON lines ({"figure": ..., "value": ..., "target": ...}) on a step's stdout, or derived
# from its JSON by scripts/gpu_check.py, which writes $OUT/summary.json and $OUT/figures.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
# torch.cuda.is_available() through NVML: no CUDA context in processes that only ask.
export PYTORCH_NVML_BASED_CUDA_CHECK=1
CPU=${GPU_CHECK_CPU:-0}
WHEELS=${WHEELS:-.whl}
START=$(date +%s)

if [ "$CPU" = 1 ]; then
  # CPU-sized: every step at twice its budget (a shared 2-core box starts Python and torch slowly),
  # the speed steps cut to one small round each; under 300 s in all.
  BUDGET_S=${BUDGET_S:-290}; SCALE=2
  DEV=cpu; PREC=fp32; GPT_ARGS='{n_layer: 2, n_head: 2, n_embd: 64}'; SEQ=64; VOCAB=512; BATCH=8; STEPS=12; LOG=5
  SMALL=--small; ROUNDS=1; CLOCKS=(--small); PLAN=(--case gpt-small-bf16)
  # the speed steps once each, small: a check that they run, not figures
  PEERS=(--rounds 1 --long 20); FUSED=(--rounds 1 --steps 2); FP8=(--steps 3 --warmup 1)
  MATMUL=(--quick --set 'matmul.shapes=[[128, 128, 128], [256, 256, 256]]' --set matmul.trials=5)
else
  BUDGET_S=${BUDGET_S:-415}; SCALE=1
  DEV=cuda; PREC=bf16; GPT_ARGS='{n_layer: 12, n_head: 12, n_embd: 768}'; SEQ=1024; VOCAB=50304; BATCH=32; STEPS=40; LOG=10
  SMALL=; MATMUL=(--set 'matmul.dtypes=[bf16]' --set matmul.trials=20 --set matmul.warmup=5 --set matmul.cooldown_s=1)
  CLOCKS=(--seconds 3); PLAN=(); ROUNDS=3; PEERS=(); FUSED=(); FP8=()
fi

: > "$OUT/steps.tsv"
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5:-}" >> "$OUT/steps.tsv"; }

# step NAME BUDGET_S CMD...: CMD under min(BUDGET_S, what is left of BUDGET_S for the run).
step() {
  local name=$1 budget=$2 limit=$(( $2 * SCALE )); shift 2
  local left=$(( BUDGET_S - ($(date +%s) - START) ))
  if [ "$left" -lt 2 ]; then
    record "$name" skipped 0 "$budget" "the run's budget of $BUDGET_S s was spent"; echo "skip  $name (budget spent)"; return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0; t0=$(date +%s)
  # through bash -c: timeout runs programs, and some steps are this script's functions (exported below)
  timeout --kill-after=5 "$limit" bash -c '"$@"' "$name" "$@" > "$OUT/$name" 2> "$OUT/$name.stderr"
  local rc=$? secs=$(( $(date +%s) - t0 ))
  local status=ok
  [ "$rc" -ne 0 ] && status=failed
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && status=timeout
  record "$name" "$status" "$secs" "$budget" "exit $rc, limit $limit s"
  echo "$status $name ($secs s of $limit s)"
}

# needs FILE NAME BUDGET_S CMD...: a step that exists only when FILE does (steps owned by other work).
needs() {
  local file=$1 name=$2 limit=$3; shift 3
  if [ ! -e "$file" ]; then
    record "$name" skipped 0 "$limit" "missing $file"; echo "skip  $name (missing $file)"; return
  fi
  step "$name" "$limit" "$@"
}

install_wheels() {
  "$PY" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" "$WHEELS"/*.whl
}

# GPT-124M training (GPT-sized on the CPU), summary JSON on stdout; extra --set items after. Compile is on by
# default on CUDA; the inductor cache is one folder for the two runs below, so the second one is the warm start.
gpt_train() {
  TORCHINDUCTOR_CACHE_DIR="$OUT/inductor-cache" "$PY" -m rubin train --quiet --json --set model.name=gpt \
    --set "model.args=$GPT_ARGS" --set data.name=synthetic_tokens \
    --set "data.args={num_samples: 8192, seq_len: $SEQ, vocab_size: $VOCAB}" --set data.batch_size=$BATCH \
    --set precision=$PREC --set run.device=$DEV --set run.epochs=null --set run.eval_every_steps=0 \
    --set telemetry.log_every_steps=$LOG --set checkpoint.every_steps=null --set checkpoint.save_final=false "$@"
}

profile_step() {  # the cold compile, with the profiler on, then its report; tokens/s and MFU are the training figures
  gpt_train --profile --set run.max_steps=$STEPS --set "run.dir=$OUT/run-gpt124m" > "$OUT/gpt124m.json" \
    && cp "$OUT/gpt124m.json" "$OUT/compile-cold.json" && "$PY" -m rubin profile "$OUT/run-gpt124m" --json
}

export OUT PY WHEELS DEV PREC GPT_ARGS SEQ VOCAB BATCH STEPS LOG
export -f install_wheels gpt_train profile_step

# Budgets (s): rubin's own steps 140, the speed and profile steps 275; 415 in all.
needs "$WHEELS"         wheels               5 install_wheels
SMI=$(command -v nvidia-smi || echo nvidia-smi)  # no driver tools: the two GPU-fact steps are skipped
needs "$SMI"            nvidia-smi.txt       2 nvidia-smi
needs "$SMI"            nvml-record.json     3 "$PY" -m rubin.platform.nvml_record
step env.json            5 "$PY" -m rubin env --json
# deep first: a cold start (its probe fills the build-facts cache), held against 20 s; then doctor warm, against 3 s.
step doctor-deep.json   20 "$PY" -m rubin doctor --deep --json
step doctor.json         6 "$PY" -m rubin doctor --json
# Only the files that hold gpu tests are collected (collecting the whole suite costs more than running these).
# plan-memory below runs test_plan_gpu_memory.py's cases once, as figures.
GPU_TESTS=$(grep -rlE "mark\.gpu|pytestmark = .*gpu" tests --include='test_*.py' | grep -v test_plan_gpu_memory.py | sort)
step pytest-gpu.txt     42 "$PY" -m pytest -o addopts= -m gpu -q -p no:cacheprovider --continue-on-collection-errors $GPU_TESTS
step bench-matmul.txt   20 "$PY" -m rubin bench matmul --device $DEV "${MATMUL[@]}" --no-plot --out "$OUT/bench-matmul.json"
step matmul-clocks.txt  10 "$PY" benchmarks/matmul_clocks.py "${CLOCKS[@]}"
step bench-vs-plain.txt 12 "$PY" benchmarks/bench_vs_plain.py $SMALL --rounds $ROUNDS
# The planner's GPU cases, once: the same cases as tests/plan/test_plan_gpu_memory.py, printed as figures.
step plan-memory.txt    15 "$PY" benchmarks/plan_memory_check.py --json-lines "${PLAN[@]}"
needs benchmarks/gpu_peers.py          gpu-peers.jsonl         90 "$PY" benchmarks/gpu_peers.py --budget-s 75 $SMALL "${PEERS[@]}"
needs benchmarks/fused_loss_memory.py  fused-loss-memory.jsonl 35 "$PY" benchmarks/fused_loss_memory.py --budget-s 25 $SMALL "${FUSED[@]}"
needs benchmarks/fp8_llama.py          fp8-llama.jsonl         65 "$PY" benchmarks/fp8_llama.py --budget-s 50 $SMALL "${FP8[@]}"
needs src/rubin/cli/profile.py         profile.json            60 profile_step
step compile-warm.json  25 gpt_train --set run.max_steps=$LOG --set "run.dir=$OUT/run-compile-warm"

echo "total $(( $(date +%s) - START )) s of $BUDGET_S s" >&2
"$PY" scripts/gpu_check.py "$OUT" --budget "$BUDGET_S" --total "$(( $(date +%s) - START ))"
rc=$?
"$PY" benchmarks/speed_figures.py "$OUT" >> "$OUT/figures.txt"  # peers, fp8, fused loss, compile cold and warm
exit $rc
