#!/usr/bin/env bash
# On a GPU machine, first: does rubin's GPU path work at all? At most 240 s (4 minutes).
#
#   bash scripts/gpu-wheels.sh                  # on a machine with a package index: fills .whl/
#   bash scripts/gpu-smoke.sh                   # on the GPU node; then scripts/gpu-check.sh, the full run
#   GPU_CHECK_CPU=1 bash scripts/gpu-smoke.sh   # the same steps CPU-sized: a test of the script itself
#
# The wheels, timed; ddp and fsdp on one rank under torchrun over NCCL (a 1-rank group, the async DCP
# save and its resume); activation checkpointing under regional compile really compiling; one compiled
# GPT-124M run with the fused loss; rubin train with fp8 on Llama-1B; a SIGKILL resume through the CUDA
# prefetcher. Outputs: OUT/summary.json and OUT/figures.txt (OUT=gpu-out); the rest in SCRATCH.
#
# Budgets (s) from estimates on one H200 (the 12-04 recordings: a torch process with CUDA starts in
# about 5 s, doctor 6 s, env 5 s; GPT-124M 85 ms a step compiled):
#   wheels 10 (0.6 s measured for the install on a 2-core VM, plus the imports, ~4 s)
#   nccl-1rank 45 (pytest ~4 s, three torchrun runs of an MLP at ~10 s each: launch, CUDA, NCCL, 12 steps)
#   ac-compile 30 (a 2-layer GPT: start ~6 s, inductor's cold compile of one recomputed block ~15 s)
#   gpt124m 55 (start ~8 s, cold regional compile ~30 s, 30 steps ~3 s, the Liger or rubin fused loss)
#   fp8-train 30 (Llama-1B: start ~6 s, 1.2B parameters and AdamW on the GPU ~6 s, 2 eager fp8 steps ~3 s)
#   resume-pair 32 (three MLP runs on digits at ~8 s each)
# Planned 202 s of 240: 38 s (16%) reserve.
source "$(dirname "$0")/gpu_check_lib.sh"
LIMIT_S=240
PLANNED_S=202

if [ "$CPU" = 1 ]; then
  NCCL_TESTS=(tests/train/test_train_distributed.py -k one_rank)  # their gloo twins
  GPT_ARGS='{n_layer: 2, n_head: 2, n_embd: 64}'; SEQ=64; VOCAB=512; BATCH=8; STEPS=6; PREC=fp32; GPT=GPT-tiny
  LLAMA='{size: tiny}'; FP8_PREC=bf16  # fp8 needs compute capability 8.9: on a CPU, the plumbing only
else
  NCCL_TESTS=(tests/train/test_nccl_gpu.py)
  GPT_ARGS='{n_layer: 12, n_head: 12, n_embd: 768}'; SEQ=1024; VOCAB=50304; BATCH=32; STEPS=30; PREC=bf16; GPT=GPT-124M
  LLAMA='{size: 1b}'; FP8_PREC=fp8
fi

gpt() {  # GPT training, no eval split; the summary to FILE: LABEL FILE FLAGS -- more --set items
  local label=$1 file=$2; shift 2
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  TORCHINDUCTOR_CACHE_DIR="$SCRATCH/inductor-$label" train_step "$label" "$file" "${flags[@]}" -- \
    --set model.name=gpt --set "model.args=$GPT_ARGS" --set data.name=synthetic_tokens \
    --set "data.args={num_samples: 4096, eval_samples: 0, seq_len: $SEQ, vocab_size: $VOCAB}" \
    --set data.batch_size=$BATCH --set precision=$PREC --set run.device=$DEV --set run.epochs=null \
    --set run.eval_every_steps=0 --set telemetry.log_every_steps=10 --set checkpoint.every_steps=null \
    --set checkpoint.save_final=false --set "run.dir=$SCRATCH/run-$label" "$@"
}
ac_compile() {
  GPT_ARGS='{n_layer: 2, n_head: 4, n_embd: 256}' SEQ=256 BATCH=8 gpt ac-compile "$SCRATCH/ac-compile.json" \
    --compiled --ac -- --set run.max_steps=6 --set distributed.compile=true --set distributed.activation_checkpointing=true
}
gpt124m() {
  gpt "$GPT" "$SCRATCH/gpt124m.json" --compiled --fused --mfu --compile-target 60 -- --set run.max_steps=$STEPS \
    --set distributed.compile=true --set model.fused_loss=$([ "$CPU" = 1 ] && echo true || echo auto)
}
fp8_train() {
  local flags=(); [ "$FP8_PREC" = fp8 ] && flags=(--fp8)
  train_step "Llama $FP8_PREC" "$SCRATCH/fp8-train.json" "${flags[@]}" -- --set model.name=llama \
    --set "model.args=$LLAMA" --set data.name=synthetic_tokens \
    --set "data.args={num_samples: 64, eval_samples: 0, seq_len: 1024, vocab_size: 32000}" --set data.batch_size=2 \
    --set precision=$FP8_PREC --set run.device=$DEV --set run.max_steps=2 --set run.epochs=null \
    --set run.eval_every_steps=0 --set distributed.compile=false --set checkpoint.save_final=false \
    --set telemetry.log_every_steps=1 --set "run.dir=$SCRATCH/run-fp8"
}
export GPT_ARGS SEQ VOCAB BATCH STEPS PREC LLAMA FP8_PREC GPT
export -f gpt ac_compile gpt124m fp8_train

needs "$WHEELS" step wheels 10 install_wheels
step pytest-nccl-1rank.txt 45 "$PY" -m pytest -o addopts= -q -p no:cacheprovider "${NCCL_TESTS[@]}"
step ac-compile            30 ac_compile
step gpt124m               55 gpt124m
step fp8-train             30 fp8_train
step resume-pair           32 "$PY" benchmarks/resume_pair.py --device $DEV --workers 0
finish smoke
