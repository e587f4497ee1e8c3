"""Model benchmarks: the reference workloads of ``rubin train`` (ViT, ResNet-50, GPT ~124M, Llama 1B) at
fixed configs per precision, run through the real training loop (``rubin.train.trainer.train``).

Reported per workload: samples/s and tokens/s (median over logged intervals), median and p90 step
time, peak memory, MFU against the dense spec, MAMF-relative MFU (achieved model FLOPs over this
node's own measured matmul ceiling, from the matmul benchmark of the same run) and energy per
sample where NVML power is available. Repeats of the whole training run are the trials.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

from rubin.bench import stats
from rubin.errors import bad_choice
from rubin.platform import device as dev
from rubin.runs import RunDir

NAME = "model"

# Fixed configs: the GPU ones are the usual reference sizes; the CPU ones keep --quick fast.
WORKLOADS_GPU = {
    "vit": ["model.name=vit", "model.args={patch_size: 16, dim: 768, depth: 12, heads: 12, mlp_ratio: 4.0}",
            "data.name=synthetic_images", "data.args={num_samples: 8192, image_size: 224}", "data.batch_size=128"],
    "resnet50": ["model.name=resnet", "model.args={layout: 50}", "data.name=synthetic_images",
                 "data.args={num_samples: 8192, image_size: 224}", "data.batch_size=128"],
    "gpt124m": ["model.name=gpt", "model.args={n_layer: 12, n_head: 12, n_embd: 768, vocab_size: 50304}",
                "data.name=synthetic_tokens", "data.args={num_samples: 4096, seq_len: 1024, vocab_size: 50304}",
                "data.batch_size=16"],
    # Llama-3.2-1B's body (GQA, SwiGLU, RoPE) with a 32k head: the kind of model a new node trains today
    "llama1b": ["model.name=llama", "model.args={size: 1b}", "data.name=synthetic_tokens",
                "data.args={num_samples: 2048, seq_len: 2048, vocab_size: 32000}", "data.batch_size=8"],
}
WORKLOADS_CPU = {
    "vit": ["model.name=vit", "model.args={patch_size: 4, dim: 64, depth: 2, heads: 4}", "data.name=synthetic_images",
            "data.args={num_samples: 1024, image_size: 32}", "data.batch_size=16"],
    "resnet50": ["model.name=resnet", "model.args={layout: 50, width: 8}", "data.name=synthetic_images",
                 "data.args={num_samples: 512, image_size: 32}", "data.batch_size=16"],
    "gpt124m": ["model.name=gpt", "model.args={n_layer: 2, n_head: 4, n_embd: 64}", "data.name=synthetic_tokens",
                "data.args={num_samples: 1024, seq_len: 64, vocab_size: 256}", "data.batch_size=16"],
    "llama1b": ["model.name=llama", "model.args={size: tiny}", "data.name=synthetic_tokens",
                "data.args={num_samples: 1024, seq_len: 64, vocab_size: 256}", "data.batch_size=16"],
}
COMMON = ["checkpoint.save_final=false", "run.eval_every_steps=0", "telemetry.sinks=[jsonl]"]


def defaults(quick: bool, ctx) -> dict:
    if ctx.gpu_count == 0:
        return {"workloads": ["vit", "gpt124m"] if quick else ["vit", "resnet50", "gpt124m", "llama1b"], "precisions": ["fp32"],
                "steps": 10 if quick else 40, "log_every": 2 if quick else 5, "repeats": 1 if quick else 3, "extra": []}
    return {"workloads": ["vit", "gpt124m"] if quick else ["vit", "resnet50", "gpt124m", "llama1b"], "precisions": ["bf16"],
            "steps": 30 if quick else 100, "log_every": 5 if quick else 10, "repeats": 1 if quick else 3, "extra": []}


def overrides(workload: str, precision: str, params: dict, run_dir: str, gpu: bool) -> list[str]:
    table = WORKLOADS_GPU if gpu else WORKLOADS_CPU
    if workload not in table:
        raise bad_choice("model.workloads", workload, table)
    return [*table[workload], *COMMON, f"precision={precision}", f"run.max_steps={int(params['steps'])}",
            f"telemetry.log_every_steps={int(params['log_every'])}", f"run.dir={run_dir}",
            f"run.name=bench-{workload}-{precision}", *params.get("extra", [])]


class PowerSampler:
    """Samples NVML board power in a thread; energy = mean power x wall time (all local GPUs)."""

    def __init__(self, indices: list[int], interval_s: float = 0.1):
        self.indices, self.interval_s, self.watts = indices, interval_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.wait(self.interval_s):
            readings = [dev.power_watts(i) for i in self.indices]
            if readings and all(r is not None for r in readings):
                self.watts.append(sum(readings))

    def __enter__(self):
        if self.indices:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)

    def mean_watts(self) -> float | None:
        return sum(self.watts) / len(self.watts) if self.watts else None


def _trainer():
    """The real training loop; a seam so tests can check the wiring without training (see tests)."""
    from rubin.train.config import load_config
    from rubin.train.trainer import train

    return load_config, train


def _flops_per_sample(cfg) -> float | None:
    """Model FLOPs per training sample, from the workload's own ``flops_per_sample``."""
    try:
        from rubin import workloads
        from rubin.workloads import registry

        _, _, info = registry.build_data(cfg.data.name, cfg.data.path, cfg.data.args, seed=0)
        model = registry.build_model(cfg.model.name, cfg.model.args, info)
        return workloads.flops_per_sample(model, info)
    except Exception:  # noqa: BLE001 - FLOPs are optional metadata; the benchmark itself still runs
        return None


def run_one(workload: str, precision: str, params: dict, ctx) -> dict:
    load_config, train = _trainer()
    gpu = ctx.gpu_count > 0
    summaries, energies, intervals = [], [], []
    flops = None
    for rep in range(int(params["repeats"])):
        ctx.progress(f"model {workload} {precision} run {rep + 1}/{params['repeats']}")
        with tempfile.TemporaryDirectory(prefix="rubin-bench-model-", dir=ctx.workdir) as tmp:
            cfg = load_config(None, overrides(workload, precision, params, str(Path(tmp) / "run"), gpu), base={})
            if flops is None:
                flops = _flops_per_sample(cfg)
            with PowerSampler(list(range(ctx.gpu_count))) as power:
                s = train(cfg, force=True, resume=False)
            # The logged intervals are the trials; the first of each run holds the warm-up.
            intervals.extend(RunDir(Path(tmp) / "run").metrics()[1:])
            summaries.append(s)
            watts, sps = power.mean_watts(), s.get("samples_per_s")
            if watts and sps:
                energies.append(watts / sps)  # J per sample = W / (samples/s)
    return _row(workload, precision, summaries, intervals, energies, flops, ctx)


def _fig(values) -> dict:
    return stats.summarize(v for v in values if v is not None)


def _row(workload, precision, summaries, intervals, energies, flops, ctx) -> dict:
    def per_interval(pick, fallback):
        values = [pick(m) for m in intervals]
        values = [v for v in values if v is not None]
        return _fig(values) if values else _fig(fallback(s) for s in summaries)

    sps = per_interval(lambda m: m.get("samples_per_s"), lambda s: s.get("samples_per_s"))
    row = {
        "workload": workload, "precision": precision, "device": str(ctx.device), "world_size": summaries[0].get("world_size", 1),
        "steps": summaries[0].get("steps"), "trials": {"runs": len(summaries), "intervals": len(intervals)},
        "samples_per_s": sps,
        "tokens_per_s": per_interval(lambda m: m.get("tokens_per_s"), lambda s: s.get("tokens_per_s")),
        "step_time_median_s": per_interval(lambda m: (m.get("time") or {}).get("step_s"),
                                           lambda s: (s.get("step_time_s") or {}).get("median")),
        "step_time_p90_s": _fig((s.get("step_time_s") or {}).get("p90") for s in summaries),
        "peak_mem_bytes": max((s.get("peak_mem_bytes") or 0) for s in summaries) or None,
        "mfu": per_interval(lambda m: m.get("mfu"), lambda s: s.get("mfu")),
        "flops_per_sample": flops,
        "energy_j_per_sample": _fig(energies),
    }
    achieved = flops * sps["median"] / row["world_size"] / 1e12 if flops and sps["median"] else None
    row["achieved_tflops_per_device"] = achieved
    mamf = ctx.mamf_tflops(precision)
    row["mamf_tflops"] = mamf
    row["mamf_mfu"] = achieved / mamf if achieved and mamf else None
    return row


def run(params: dict, ctx) -> dict:
    rows = [run_one(w, p, params, ctx) for w in params["workloads"] for p in params["precisions"]]
    summary = {f"{r['workload']}/{r['precision']}": {"samples_per_s": r["samples_per_s"]["median"],
                                                     "mfu": r["mfu"]["median"], "mamf_mfu": r["mamf_mfu"]} for r in rows}
    notes = [] if ctx.gpu_count else ["CPU: small configs of the same workloads, so the loop is exercised; not a GPU figure"]
    return {"rows": rows, "summary": summary, "notes": notes,
            "method": {"loop": "rubin.train.trainer.train (the real training loop)",
                       "trials": "every logged interval (telemetry.log_every_steps steps) after the first of each run, over all repeats",
                       "mfu": "model FLOPs/s over the dense spec peak (from the trainer)",
                       "mamf_mfu": "model FLOPs/s per device over this run's matmul MAMF for the same dtype",
                       "energy": "mean NVML board power over the run / samples per s"}}
