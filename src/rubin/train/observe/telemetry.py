"""Where every second of a step goes, and the derived figures (throughput, MFU, memory, NVML).

Time is split per logging interval, not per step: the loop only synchronizes the device when it
logs, so per-step splits on a GPU would be fiction. ``data_s`` is time blocked on the loader,
``ckpt_s`` time blocked on checkpoints, ``compute_s`` the rest of the interval's wall time.
"""

from __future__ import annotations

import statistics
import time
import warnings

import torch

from rubin.platform import device as dev


class Telemetry:
    def __init__(self, cfg, info, run, sinks, *, flops_per_sample, tokens_per_sample: int, precision: str):
        self.cfg, self.info, self.run, self.sinks = cfg, info, run, sinks
        self.flops_per_sample = flops_per_sample
        self.tokens_per_sample = tokens_per_sample
        self.peak_flops = self._peak_flops(precision, cfg_allow_tf32=True)
        self.sampler = self._nvml_sampler() if cfg.telemetry.nvml else None
        # Per logged step, the last (samples/s, step time): a rollback re-logs the steps it re-does.
        self.intervals: dict[int, tuple[float, float]] = {}
        # Rows already logged per step by earlier attempts of this run (resumes): re-done steps are marked.
        self.attempts = {"metrics": _logged_steps(run.metrics() if info.is_main else []),
                         "eval": _logged_steps(run.evals() if info.is_main else [])}
        self.totals = {"data_s": 0.0, "compute_s": 0.0, "ckpt_s": 0.0, "step_s": 0.0}
        self._reset_interval()

    # -- setup ---------------------------------------------------------------------
    def _peak_flops(self, precision: str, cfg_allow_tf32: bool) -> float | None:
        """Dense peak per device from the one spec catalog; an unknown GPU gets none and one warning."""
        device = self.info.device
        if device.type != "cuda" or not self.flops_per_sample:
            return None
        from rubin.platform import specs

        name = dev.device_name(device)
        spec = specs.match(name)
        if spec is None:
            self.run.event("warning", message=f"GPU {name!r} is not in the spec catalog: MFU is not reported")
            return None
        # fp8 counts against the bf16 peak, as torchtitan reports it: the same model FLOPs, a faster way to do them
        dtype = {"bf16": "bf16", "fp16": "fp16", "fp8": "bf16"}.get(precision, "tf32" if self.cfg.run.allow_tf32 else "fp32")
        tflops = specs.peak_tflops(spec, dtype)
        return tflops * 1e12 if tflops else None

    def _nvml_sampler(self):
        if self.info.device.type != "cuda":
            return None
        try:
            from rubin.platform.nvml import NvmlSampler, index_of

            return NvmlSampler(index_of(self.info.device))  # by UUID: NVML numbers GPUs its own way
        except Exception as exc:  # noqa: BLE001 - NVML is optional; say so once
            warnings.warn(f"NVML sampling is off: {exc}")
            return None

    def _reset_interval(self) -> None:
        self._t0 = time.perf_counter()
        self._data = self._ckpt = 0.0
        self._steps = self._samples = 0
        self._losses = []  # device tensors, summed at the log point: no host sync and no kernel per step

    # -- per step --------------------------------------------------------------------
    def add_data_time(self, s: float) -> None:
        self._data += s

    def add_ckpt_time(self, s: float) -> None:
        self._ckpt += s

    def exclude_time(self, s: float) -> None:
        """Leave out time that is not training (evaluation) from the interval."""
        self._t0 += s

    def on_step(self, step: int, samples: int, loss) -> None:
        self._steps += 1
        self._samples += samples
        if loss is not None:  # None for a step whose update was dropped (non-finite loss)
            self._losses.append(loss)  # detached by the loop

    def drop_losses(self) -> None:
        """Forget the interval's losses: a rollback undid the steps they came from."""
        self._losses = []

    def _mean_loss(self) -> float | None:
        """Mean loss over the interval and over ranks (each rank saw its share of the global batch)."""
        if not self._losses:
            return None
        n = len(self._losses)
        total = torch.stack(self._losses).float().sum().reshape(1)
        if self.info.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(total)
            total = total / self.info.world_size
        return float(total.item()) / n

    def due(self, step: int) -> bool:
        return step % self.cfg.telemetry.log_every_steps == 0

    def log(self, step: int, *, lr: float, grad_norm: float | None, epoch: float) -> dict:
        dev.synchronize(self.info.device)
        wall = max(time.perf_counter() - self._t0, 1e-9)
        steps = max(self._steps, 1)
        compute = max(wall - self._data - self._ckpt, 0.0)
        sps = self._samples / wall
        row = {
            "step": step,
            "attempt": self._attempt("metrics", step),
            "epoch": round(epoch, 4),
            "loss": self._mean_loss(),
            "lr": lr,
            "grad_norm": grad_norm,
            "samples_per_s": sps,
            "time": {
                "data_s": self._data / steps,
                "compute_s": compute / steps,
                "ckpt_s": self._ckpt / steps,
                "step_s": wall / steps,
            },
            "mem": {"peak_bytes": dev.peak_memory_bytes(self.info.device), "device": self.info.device.type},
        }
        if self.tokens_per_sample:
            row["tokens_per_s"] = sps * self.tokens_per_sample
        if self.peak_flops:
            row["mfu"] = self.flops_per_sample * sps / (self.peak_flops * self.info.world_size)
        if self.sampler is not None:
            sample = self.sampler.sample()
            if sample:
                row["nvml"] = sample
        self.intervals[step] = (sps, wall / steps)
        for k, v in (("data_s", self._data), ("compute_s", compute), ("ckpt_s", self._ckpt), ("step_s", wall)):
            self.totals[k] += v
        for sink in self.sinks:
            sink.metrics(row)
        self._reset_interval()
        return row

    def _attempt(self, kind: str, step: int) -> int:
        """1 the first time STEP is logged in this run; k when a resume or rollback re-does it (k-1 rows before)."""
        counts = self.attempts[kind]
        counts[step] = counts.get(step, 0) + 1
        return counts[step]

    def log_eval(self, row: dict) -> None:
        row = {"step": row["step"], "attempt": self._attempt("eval", row["step"]), **row}
        for sink in self.sinks:
            sink.eval(row)

    # -- end ---------------------------------------------------------------------------
    def summary(self) -> dict:
        # The last value per step (re-done steps count once); the first interval includes warm-up
        # (allocation, compile): drop it when there are others. time_split stays the time spent.
        logged = [v for _, v in sorted(self.intervals.items())]
        rates = [r for r, _ in logged[1:] or logged]
        times = [t for _, t in logged[1:] or logged]
        out = {
            "samples_per_s": statistics.median(rates) if rates else None,
            "step_time_s": {
                "median": statistics.median(times) if times else None,
                "p90": _quantile(times, 0.9) if times else None,
            },
            "time_split": {k: v for k, v in self.totals.items()},
            "peak_mem_bytes": dev.peak_memory_bytes(self.info.device),
        }
        total = self.totals["step_s"] or 1.0
        out["time_share"] = {k: self.totals[k] / total for k in ("data_s", "compute_s", "ckpt_s")}
        if self.tokens_per_sample and out["samples_per_s"]:
            out["tokens_per_s"] = out["samples_per_s"] * self.tokens_per_sample
        if self.peak_flops and out["samples_per_s"]:
            out["mfu"] = self.flops_per_sample * out["samples_per_s"] / (self.peak_flops * self.info.world_size)
        return out

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def _logged_steps(rows: list[dict]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for r in rows:
        if isinstance(r.get("step"), int):
            counts[r["step"]] = counts.get(r["step"], 0) + 1
    return counts


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    idx = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return s[idx]
