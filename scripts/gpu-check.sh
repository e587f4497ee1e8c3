#!/usr/bin/env bash
# On a GPU machine: the gpu-marked tests and the GPU benchmarks, results under $OUT (default ./gpu-out).
#   bash scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || { python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 -e '.[test]'; PY=.venv/bin/python; }
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
$PY -m rubin env --json > "$OUT/env.json" 2>&1
$PY -m rubin doctor --json > "$OUT/doctor.json" 2>&1
timeout 120 $PY -m rubin doctor --deep --json > "$OUT/doctor-deep.json" 2>&1
timeout 240 $PY -m pytest -m gpu -q > "$OUT/pytest-gpu.txt" 2>&1; echo "pytest rc=$?" >> "$OUT/pytest-gpu.txt"
# The full preset's model suite alone outlasts a short device slot: quick for everything, full matmul.
timeout 240 $PY -m rubin bench all --quick --out "$OUT/bench-quick.json" > "$OUT/bench-quick.txt" 2>&1
timeout 200 $PY -m rubin bench matmul --out "$OUT/bench-matmul.json" > "$OUT/bench-matmul.txt" 2>&1
$PY -m rubin.platform.nvml_record > "$OUT/nvml-record.json" 2>&1
nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
timeout 120 $PY benchmarks/bench_vs_plain.py > "$OUT/bench_vs_plain.txt" 2>&1
timeout 180 $PY -m rubin train examples/gpt_text.yaml --quiet --json --set data.name=synthetic_tokens --set data.path=null \
  --set 'data.args={num_samples: 4096, seq_len: 1024, vocab_size: 50304}' --set 'model.args={n_layer: 12, n_head: 12, n_embd: 768}' \
  --set data.batch_size=16 --set precision=bf16 --set run.max_steps=60 --set run.eval_every_steps=0 \
  --set checkpoint.every_steps=null --set checkpoint.save_final=false --set "run.dir=$OUT/gpt-small" > "$OUT/gpt-small.json" 2>&1
timeout 120 $PY benchmarks/plan_memory_check.py > "$OUT/plan_memory_check.txt" 2>&1
ls -la "$OUT"
