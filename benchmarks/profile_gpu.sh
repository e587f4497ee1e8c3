#!/usr/bin/env bash
# Profile GPT-124M eager on one GPU and print the verdict as JSON: `rubin train --profile`, then
# `rubin profile RUN --json`. About 60 s on an H200 (start-up, 12 steps, the trace export and its analysis).
#
#   bash benchmarks/profile_gpu.sh [RUN_DIR]                  # on the GPU node; JSON on stdout
#   GPU_CHECK_CPU=1 bash benchmarks/profile_gpu.sh /tmp/run   # a tiny GPT on the CPU: checks the script itself
#
# The window: no checkpoint, no compile, so it opens at once; 3 untraced steps (the baseline of the stated
# cost), 1 warm-up, 4 traced. The verdict should agree with what the GPU-speed work measured for this model.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${1:-gpu-out/run-gpt124m-profile}
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
if [ "${GPU_CHECK_CPU:-0}" = 1 ]; then
  DEV=cpu; PREC=fp32; ARGS='{n_layer: 2, n_head: 2, n_embd: 64}'; SEQ=64; VOCAB=512; BATCH=8
else
  DEV=cuda; PREC=bf16; ARGS='{n_layer: 12, n_head: 12, n_embd: 768}'; SEQ=1024; VOCAB=50304; BATCH=32
fi
"$PY" -m rubin train --quiet --profile --force \
  --set model.name=gpt --set "model.args=$ARGS" --set data.name=synthetic_tokens \
  --set "data.args={num_samples: 2048, seq_len: $SEQ, vocab_size: $VOCAB}" --set data.batch_size=$BATCH \
  --set precision=$PREC --set run.device=$DEV --set run.max_steps=12 --set run.epochs=null \
  --set run.eval_every_steps=0 --set telemetry.log_every_steps=4 --set distributed.compile=false \
  --set checkpoint.every_steps=null --set checkpoint.save_final=false \
  --set profile.skip=3 --set profile.warmup=1 --set profile.active=4 --set "run.dir=$RUN" >&2
"$PY" -m rubin profile "$RUN" --json
