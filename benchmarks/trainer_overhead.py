"""rubin train against a minimal hand-written PyTorch loop: same model, data, batch, optimizer and device.

Each side runs in its own fresh process, alternating which goes first, and both are timed by this
script's code with the same clocks around the same window: from just after step WARMUP's log point to just after the
last step's log point (rubin's log point is its metrics line; the plain loop's is its
``loss.item()``). So rubin's loop overhead, logging and agreement included, is inside the
window; nothing is taken from rubin's self-reported ``time.step_s``.

Two figures per side:
  wall  samples/s over the window (perf_counter), the throughput a user sees;
  cpu   CPU seconds per step of this process (all threads, ``time.process_time``), steadier than
        wall time on shared cores, and the direct measure of host-side overhead.
The ratios are rubin/plain for throughput (>= 1.0: rubin is not slower) and plain/rubin for CPU
per step (>= 1.0: rubin burns no more CPU). Telemetry stays on in rubin (JSONL every 10 steps,
the NaN/preemption agreement, heartbeats); checkpoints and evaluation are off on both sides.

    python benchmarks/trainer_overhead.py [--steps 300] [--trials 5] [--model vit|mlp|gpt] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from rubin import workloads
from rubin.runs import RunDir
from rubin.train.config import load_config
from rubin.train.strategy import build_optimizer, build_scheduler
from rubin.train.trainer import train
from rubin.workloads.contract.outputs import loss_fn

WARMUP = 20
LOG_EVERY = 10

MODELS = {
    "vit": ["model.name=vit", "model.args={patch_size: 2, dim: 64, depth: 4, heads: 4, mlp_ratio: 2.0}", "data.name=digits"],
    "mlp": ["model.name=mlp", "model.args={hidden: 512, depth: 3}", "data.name=synthetic",
            "data.args={num_samples: 32768, features: 256}"],
    # So small that a step is mostly loop overhead: the CPU-time difference is rubin's own cost per step.
    "mlp-tiny": ["model.name=mlp", "model.args={hidden: 16, depth: 1}", "data.name=synthetic",
                 "data.args={num_samples: 4096, features: 8}"],
    # GPT-2 small shapes at a short context: sized for a GPU.
    "gpt": ["model.name=gpt", "model.args={n_layer: 12, n_head: 12, n_embd: 768}", "data.name=synthetic_tokens",
            "data.args={num_samples: 8192, seq_len: 256, vocab_size: 50304}"],
    "gpt-tiny": ["model.name=gpt", "model.args={n_layer: 2, n_head: 2, n_embd: 64}", "data.name=synthetic_tokens",
                 "data.args={num_samples: 4096, seq_len: 64, vocab_size: 512}"],
}


def configs(model: str, steps: int, run_dir: str, device: str, precision: str, batch: int):
    return load_config(None, MODELS[model] + [
        f"run.max_steps={steps}", "run.epochs=null", f"run.dir={run_dir}", f"data.batch_size={batch}",
        f"telemetry.log_every_steps={LOG_EVERY}", "checkpoint.every_steps=null", "checkpoint.save_final=false",
        "optim.warmup_steps=10", "run.eval_every_steps=0", f"run.device={device}", f"precision={precision}",
        "telemetry.nvml=false",
    ])


class Window:
    """Wall and CPU clocks (and the minor page-fault count) read at the first and last mark."""

    def __init__(self):
        self.start = self.end = None

    def mark(self, first: bool) -> None:
        now = (time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
        if first:
            self.start = now
        else:
            self.end = now

    def figures(self, steps: int, batch: int) -> tuple[float, float, float]:
        """(samples/s, CPU seconds per step, minor page faults per step) over the window.

        Page faults show allocator churn: when glibc serves the step's large tensors by mmap
        (its threshold moves with the process's history), each step faults its pages in again,
        and that side's CPU time rises for a reason outside either loop.
        """
        wall, cpu, faults = (e - s for s, e in zip(self.start, self.end))
        return steps * batch / wall, cpu / steps, faults / steps


@contextlib.contextmanager
def marks_on_metrics(window: Window, last_step: int):
    """Read the clocks when rubin writes the metrics line of step WARMUP and of the last step."""
    original = RunDir.log_metrics

    def log_metrics(self, row):
        original(self, row)
        if row["step"] in (WARMUP, last_step):
            window.mark(row["step"] == WARMUP)

    RunDir.log_metrics = log_metrics
    try:
        yield
    finally:
        RunDir.log_metrics = original


def rubin_side(cfg) -> tuple[float, float]:
    window = Window()
    with marks_on_metrics(window, cfg.run.max_steps):
        train(cfg, resume=False)
    return window.figures(cfg.run.max_steps - WARMUP, cfg.data.batch_size)


def plain_side(cfg, device: torch.device) -> tuple[float, float]:
    """The loop people copy: DataLoader(shuffle), optional autocast, clip, AdamW, cosine, loss printed every 10 steps."""
    torch.manual_seed(cfg.run.seed)
    train_ds, _, info = workloads.build_data(cfg.data.name, None, dict(cfg.data.args), seed=0, cache_dir=None)
    model = workloads.build_model(cfg.model.name, dict(cfg.model.args), info).to(device)
    opt = build_optimizer(model, cfg.optim, device)
    sched = build_scheduler(opt, cfg.optim, cfg.run.max_steps)
    cuda = device.type == "cuda"
    loader = torch.utils.data.DataLoader(train_ds, batch_size=cfg.data.batch_size, shuffle=True, drop_last=True, pin_memory=cuda)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision)
    autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else contextlib.nullcontext
    window, step = Window(), 0
    while step < cfg.run.max_steps:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with autocast():
                loss = loss_fn(info.task, model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            step += 1
            if step % LOG_EVERY == 0:
                loss.item()  # a plain loop prints its loss now and then too: its one host sync
                if step in (WARMUP, cfg.run.max_steps):
                    window.mark(step == WARMUP)
            if step >= cfg.run.max_steps:
                break
    return window.figures(cfg.run.max_steps - WARMUP, cfg.data.batch_size)


def spread(xs: list[float], fmt: str = ".3f") -> str:
    return f"median {statistics.median(xs):{fmt}} (min {min(xs):{fmt}}, max {max(xs):{fmt}}, n={len(xs)})"


def one_side(a, side: str, run_dir: str) -> None:
    """Child mode: run one side once in this fresh process and print its figures as JSON."""
    torch.set_num_threads(a.threads)
    cfg = configs(a.model, a.steps, run_dir, a.device, a.precision, a.batch)
    sps, cpu, faults = plain_side(cfg, torch.device(a.device)) if side == "plain" else rubin_side(cfg)
    print(json.dumps({"sps": sps, "cpu": cpu, "faults": faults, "threads": torch.get_num_threads()}))


# glibc's malloc moves its mmap threshold as a process frees large blocks, so whether a step's
# tensors are served from the heap or mmapped (and page-faulted in again every step) depends on the
# order of a process's first allocations. Measured here, that coin toss alone moves CPU time per step
# by 30-50% between two runs of the same loop (1,000 page faults a step against none). Both sides get
# the same fixed thresholds (32 MiB, glibc's maximum), so the ratio measures the loops, not the toss.
PINNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(64 << 20)}


def run_side(a, side: str, run_dir: str) -> tuple[float, float, float]:
    """One side in a fresh interpreter: neither side inherits the other's allocator state or warm caches."""
    env = dict(os.environ) if a.glibc_default else dict(os.environ, **PINNED_MALLOC)
    cmd = [sys.executable, __file__, "--side", side, "--run-dir", run_dir, "--model", a.model, "--steps", str(a.steps),
           "--device", a.device, "--precision", a.precision, "--batch", str(a.batch), "--threads", str(a.threads)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{side} side failed ({p.returncode}):\n{p.stderr[-3000:]}")
    got = json.loads(p.stdout.strip().splitlines()[-1])
    return got["sps"], got["cpu"], got["faults"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--model", choices=sorted(MODELS), default="vit")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default=None, help="default: bf16 on cuda, fp32 on cpu")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1: on shared cores, spinning OpenMP threads inflate both clocks)")
    ap.add_argument("--glibc-default", action="store_true",
                    help="leave glibc's dynamic mmap threshold alone (see PINNED_MALLOC): shows the allocator's coin toss")
    ap.add_argument("--side", choices=["plain", "rubin"], help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--run-dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.steps < WARMUP + 2 * LOG_EVERY or a.steps % LOG_EVERY:
        ap.error(f"--steps={a.steps}: use a multiple of {LOG_EVERY} of at least {WARMUP + 2 * LOG_EVERY}")
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device=cuda: no CUDA device is visible; use --device cpu")
    a.precision = a.precision or ("bf16" if a.device == "cuda" else "fp32")
    if a.side:
        return one_side(a, a.side, a.run_dir)
    walls, cpus, rows = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.trials):
            # Alternate which side goes first, so drift and warm caches favour neither.
            order = ("plain", "rubin") if i % 2 == 0 else ("rubin", "plain")
            got = {side: run_side(a, side, f"{tmp}/{side}{i}") for side in order}
            (p_sps, p_cpu, p_flt), (r_sps, r_cpu, r_flt) = got["plain"], got["rubin"]
            walls.append(r_sps / p_sps)
            cpus.append(p_cpu / r_cpu)
            rows.append((p_sps, r_sps, p_cpu, r_cpu))
            print(f"trial {i}: samples/s plain {p_sps:9.1f} rubin {r_sps:9.1f} (ratio {walls[-1]:.3f})   "
                  f"CPU ms/step plain {p_cpu * 1e3:7.2f} rubin {r_cpu * 1e3:7.2f} (ratio {cpus[-1]:.3f})   "
                  f"page faults/step plain {p_flt:.0f} rubin {r_flt:.0f}", flush=True)
    print(f"model={a.model} device={a.device} precision={a.precision} steps={a.steps} (window: steps {WARMUP + 1}..{a.steps}) "
          f"batch={a.batch} trials={a.trials} torch threads={a.threads}; each side in its own fresh process, "
          f"{'glibc default malloc' if a.glibc_default else 'malloc thresholds pinned alike on both sides'}")
    print(f"plain samples/s      {spread([r[0] for r in rows], '.1f')}")
    print(f"rubin samples/s      {spread([r[1] for r in rows], '.1f')}")
    print(f"plain CPU ms/step    {spread([r[2] * 1e3 for r in rows], '.2f')}")
    print(f"rubin CPU ms/step    {spread([r[3] * 1e3 for r in rows], '.2f')}")
    print(f"throughput ratio rubin/plain   {spread(walls)}   target >= {0.99 if a.device == 'cuda' else 1.0}")
    print(f"CPU-time ratio plain/rubin     {spread(cpus)}   target >= 1.0")


if __name__ == "__main__":
    main()
