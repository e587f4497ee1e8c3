#!/usr/bin/env bash
# On a GPU machine: every GPU figure rubin quotes, and the gpu-marked tests, in one run that fits a
# short device slot. Results go under $OUT (default ./gpu-out): each step's stdout in $OUT/NAME (JSON
# where the command prints JSON, e.g. doctor-deep.json, the fixture recorded on a real GPU), its
# stderr in $OUT/NAME.stderr, and steps.tsv (step, exit code, seconds) so a step that failed or timed
# out is visible at a glance. figures.txt collects the headline figures.
#
#   bash scripts/gpu-check.sh                       # on the GPU node
#   GPU_CHECK_CPU=1 bash scripts/gpu-check.sh       # the same command lines, CPU-sized: checks the script itself
#
#   SUITE=speed bash scripts/gpu-check.sh           # only the speed figures (peers, fp8, fused loss, compile cache): ~420 s
#
# BUDGET_S (default 540; 420 for SUITE=speed) bounds the whole run: each step gets its own timeout, cut to what is left.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
SUITE=${SUITE:-all}
if [ "$SUITE" = speed ]; then BUDGET_S=${BUDGET_S:-420}; else BUDGET_S=${BUDGET_S:-540}; fi
START=$(date +%s)
CPU=${GPU_CHECK_CPU:-0}

# Sizes: GPT-124M (GPT-2 small) at seq 1024 on the GPU; a tiny GPT and few steps on the CPU.
if [ "$CPU" = 1 ]; then
  DEV=cpu; PREC=fp32; GPT_ARGS='{n_layer: 2, n_head: 2, n_embd: 64}'; SEQ=64; VOCAB=512; BATCH=8; STEPS=20; LOG=5
  OVERHEAD="--device cpu --steps 40 --trials 1"; GPT_OVERHEAD=gpt-tiny; PLAIN="--small --rounds 1"
else
  DEV=cuda; PREC=bf16; GPT_ARGS='{n_layer: 12, n_head: 12, n_embd: 768}'; SEQ=1024; VOCAB=50304; BATCH=32; STEPS=80; LOG=20
  OVERHEAD="--device cuda --trials 5"; GPT_OVERHEAD=gpt; PLAIN="--rounds 5"
fi

# step NAME TIMEOUT_S CMD...: runs CMD (stdout to $OUT/NAME, stderr to $OUT/NAME.stderr) under min(TIMEOUT_S, time left).
step() {
  local name=$1 limit=$2; shift 2
  local left=$(( BUDGET_S - ($(date +%s) - START) - 5 ))
  if [ "$left" -lt 10 ]; then
    printf '%s\tskipped\t0\n' "$name" >> "$OUT/steps.tsv"; echo "skip  $name (budget spent)"; return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name" 2> "$OUT/$name.stderr"
  local rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$OUT/steps.tsv"
  echo "rc=$rc $name ($(( $(date +%s) - t0 )) s, limit $limit s)"
}

# GPT on synthetic tokens; --json prints the summary (tokens_per_s, mfu) on stdout. Append distributed.compile and run.dir.
GPT=("$PY" -m rubin train --quiet --json
  --set model.name=gpt --set "model.args=$GPT_ARGS" --set data.name=synthetic_tokens
  --set "data.args={num_samples: 8192, seq_len: $SEQ, vocab_size: $VOCAB}" --set data.batch_size=$BATCH
  --set precision=$PREC --set run.device=$DEV --set run.max_steps=$STEPS --set run.epochs=null
  --set run.eval_every_steps=0 --set telemetry.log_every_steps=$LOG
  --set checkpoint.every_steps=null --set checkpoint.save_final=false)

: > "$OUT/steps.tsv"
if [ "$SUITE" = speed ]; then
  # GPT-124M: rubin (defaults) vs the nanoGPT-style fused loop, fresh processes, 3 rounds (~100 s on an H200)
  if [ "$CPU" = 1 ]; then SMALL=--small; NOCOMPILE=--no-compile; else SMALL=; NOCOMPILE=; fi
  step gpu-peers.jsonl        130 "$PY" benchmarks/gpu_peers.py --sides rubin,plain --budget-s 100 $SMALL
  step fp8-llama.jsonl         90 "$PY" benchmarks/fp8_llama.py --budget-s 70 $SMALL $NOCOMPILE
  step fused-loss-memory.jsonl 60 "$PY" benchmarks/fused_loss_memory.py --budget-s 40 $SMALL
  # compile on a cold cache, then the same run again on the warm one (a requeued run): compile_s of each
  export TORCHINDUCTOR_CACHE_DIR="$OUT/inductor-cache"
  step compile-cold.json       90 "${GPT[@]}" --set run.max_steps=20 --set "run.dir=$OUT/run-compile-cold"
  step compile-warm.json       45 "${GPT[@]}" --set run.max_steps=20 --set "run.dir=$OUT/run-compile-warm"
  unset TORCHINDUCTOR_CACHE_DIR
  step pytest-gpu-speed.txt    40 "$PY" -m pytest -m gpu -q -p no:cacheprovider tests/train/test_gpu_speed_units.py
  "$PY" benchmarks/speed_figures.py "$OUT" > "$OUT/figures.txt" 2>&1
  cat "$OUT/figures.txt"
  echo "steps (name, rc, seconds):"; cat "$OUT/steps.tsv"
  echo "total $(( $(date +%s) - START )) s, results in $OUT"
  exit 0
fi
step nvidia-smi.txt       20  nvidia-smi
step topo.txt             20  nvidia-smi topo -m
step env.json             60  "$PY" -m rubin env --json
step doctor.json          90  "$PY" -m rubin doctor --json
# Recorded on a real GPU: the doctor fixture that replaces the format-only ones under tests/fixtures/doctor where they differ.
step doctor-deep.json    120  "$PY" -m rubin doctor --deep --json
step nvml-record.json     30  "$PY" -m rubin.platform.nvml_record
step pytest-gpu.txt      150  "$PY" -m pytest -m gpu -q -p no:cacheprovider --continue-on-collection-errors
step gpt124m-eager.json  120  "${GPT[@]}" --set distributed.compile=false --set "run.dir=$OUT/run-gpt124m-eager"
step gpt124m-compile.json 180 "${GPT[@]}" --set distributed.compile=true --set "run.dir=$OUT/run-gpt124m-compile"
step overhead-vit.txt    120  "$PY" benchmarks/trainer_overhead.py $OVERHEAD --model vit
step bench-vs-plain.txt  120  "$PY" benchmarks/bench_vs_plain.py $PLAIN
step plan-memory.txt     120  "$PY" benchmarks/plan_memory_check.py
step overhead-gpt.txt    150  "$PY" benchmarks/trainer_overhead.py $OVERHEAD --model $GPT_OVERHEAD --steps 60
step bench-matmul.txt    120  "$PY" -m rubin bench matmul --device $DEV --out "$OUT/bench-matmul.json"

# One line per figure, from the files above (a missing figure prints as "-").
"$PY" - "$OUT" > "$OUT/figures.txt" 2>&1 <<'EOF'
import json, pathlib, re, sys
out = pathlib.Path(sys.argv[1])
def summary(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return {}
for name in ("gpt124m-eager.json", "gpt124m-compile.json"):
    s = summary(name)
    mfu = s.get("mfu")
    print(f"{name}: tokens/s {s.get('tokens_per_s', '-')}  MFU {f'{mfu:.3f}' if mfu else '-'}  (target MFU >= 0.45)")
for name in ("overhead-vit.txt", "overhead-gpt.txt", "bench-vs-plain.txt"):
    try:
        lines = (out / name).read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        if re.search(r"ratio", line) and not line.startswith("trial"):
            print(f"{name}: {line.strip()}")
EOF
cat "$OUT/figures.txt"
echo "steps (name, rc, seconds):"; cat "$OUT/steps.tsv"
echo "total $(( $(date +%s) - START )) s, results in $OUT"
