"""The training loop. It reads top to bottom; features hook in at named points.

    train(cfg) -> summary dict       (the library entry point; ``rubin train`` calls it)
"""

from __future__ import annotations

import math
import os
import time

import torch

from rubin.errors import ExitCode, RubinError, UsageError
from rubin.train import distributed, setup, state as st
from rubin.train.console import Console
from rubin.train.data import GlobalBatchSampler, eval_loader, plan_batches, train_loader
from rubin.train.guard import FaultHooks
from rubin.train.optim import build_optimizer, build_scheduler
from rubin.train.precision import Precision
from rubin.train.saver import Saver
from rubin.train.sinks import build_sinks, require as require_sinks
from rubin.train.strategy import Strategy, resolve
from rubin.train.task import evaluate, loss_fn
from rubin.train.telemetry import Telemetry


class Preempted(RubinError):
    exit_code = ExitCode.PREEMPTED


def train(cfg, *, force: bool = False, resume: bool = True, quiet: bool = False) -> dict:
    info = distributed.setup(cfg)
    ok = False
    try:
        summary = Trainer(cfg, info, force=force, resume=resume, quiet=quiet).fit()
        ok = True
        return summary
    except Preempted:
        ok = True  # every rank agreed to stop and saved: the group is healthy, tear down cleanly
        raise
    finally:
        if ok:
            distributed.teardown(info)
        else:
            _abort(info)


def _abort(info) -> None:
    import torch.distributed as dist

    if info.initialized and dist.is_initialized():
        dist.destroy_process_group()


class Trainer:
    def __init__(self, cfg, info, *, force: bool, resume: bool, quiet: bool):
        self.cfg, self.info, self.t_start = cfg, info, time.time()
        torch.manual_seed(cfg.run.seed)  # same initial weights on every rank
        if cfg.run.deterministic:
            if info.device.type == "cuda":
                os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
        # -- bad input is found here, before the run dir is touched --
        self.plan = plan_batches(cfg.data.batch_size, cfg.data.micro_batch_size, info.world_size)
        train_ds, eval_ds, self.data_info = setup.build_data(cfg, cache_dir=str(cfg.run_dir))
        self.task = cfg.data.task or self.data_info.task
        model = setup.build_model(cfg, self.data_info)
        self.sampler = GlobalBatchSampler(len(train_ds), self.plan, info.rank, seed=cfg.run.seed)
        self.total_steps = setup.total_steps(cfg, self.sampler.steps_per_epoch())
        require_sinks(cfg.telemetry.sinks)
        self.run, resuming = self._prepare_run_dir(force, resume)
        # -- the run exists from here on --
        from rubin import workloads
        from rubin.platform.fingerprint import fingerprint

        self.env = fingerprint(str(self.run.path)) if info.is_main else {}
        self.run.write_env(self.env)
        name = resolve(cfg.distributed.strategy, info.world_size)
        self.strategy = Strategy(
            name, model, info, blocks=workloads.model_blocks(model),
            compile=cfg.distributed.compile, act_ckpt=cfg.distributed.activation_checkpointing,
        )
        self.optimizer = build_optimizer(self.strategy.module, cfg.optim)
        self.scheduler = build_scheduler(self.optimizer, cfg.optim, self.total_steps)
        self.precision = Precision(cfg.precision, info.device)
        self.loader = train_loader(train_ds, self.sampler, cfg.data, info.device, cfg.run.seed)
        eval_batch = cfg.data.eval_batch_size or self.plan.micro_batch
        self.eval_loader = eval_loader(eval_ds, info.rank, info.world_size, eval_batch, cfg.data, info.device) if eval_ds is not None else None
        self.saver = Saver(
            cfg, info, self.run, strategy=self.strategy, optimizer=self.optimizer, scheduler=self.scheduler,
            precision=self.precision, env=self.env, config_hash=cfg.hash(), barrier=lambda: distributed.barrier(info),
        )
        self.telemetry = Telemetry(
            cfg, info, self.run, build_sinks(cfg.telemetry.sinks, self.run, cfg.model_dump(mode="json", by_alias=True)),
            flops_per_sample=workloads.flops_per_sample(model, self.data_info),
            tokens_per_sample=self.data_info.tokens_per_sample, precision=cfg.precision,
        )
        self.faults = FaultHooks(cfg, info, self.run)
        self.loop = st.LoopState()
        st.reseed(cfg.run.seed, info.rank)
        if resuming:
            self._resume()
        self.console = Console(enabled=info.is_main and not quiet, total_steps=self.total_steps, start_step=self.loop.step)
        self.last_loss: float | None = None
        self._grace_checked = self.saver.check_grace(self.console.print) is not None  # from an earlier attempt's saves

    def _prepare_run_dir(self, force, resume):
        result = None
        if self.info.is_main:
            try:
                run, resuming = setup.prepare_run_dir(self.cfg, 0, force=force, resume=resume)
                result = ("ok", resuming)
            except UsageError as err:
                result = ("error", str(err))
        result = distributed.broadcast_object(self.info, result)
        if result[0] == "error":
            raise UsageError(result[1])
        from rubin.runs import RunDir

        run = RunDir(self.cfg.run_dir, rank=self.info.rank)
        return run, result[1]

    def _resume(self) -> None:
        found = self.saver.latest()
        if found is None:
            return
        step, path = found
        self.loop = st.load(path, self.strategy, self.optimizer, self.scheduler, self.precision, self.info.rank, self.cfg.run.seed)
        self.run.event("checkpoint_loaded", step=step, path=str(path))
        self.run.event("resume", step=step, epoch=self.loop.epoch, sample_in_epoch=self.loop.sample_in_epoch)

    # ------------------------------------------------------------------------------------
    def fit(self) -> dict:
        cfg, loop, info = self.cfg, self.loop, self.info
        self.run.event("start", step=loop.step, total_steps=self.total_steps, world_size=info.world_size,
                       strategy=self.strategy.name, precision=cfg.precision, device=str(info.device),
                       restart_count=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)))
        restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
        if restarts:
            self.run.event("restart", restart_count=restarts, step=loop.step)
        self.faults.start()
        self.console.print(
            f"rubin train: {cfg.model.import_ or cfg.model.name} on {cfg.data.import_ or cfg.data.name}, "
            f"{self.total_steps} steps, {self.strategy.name} x{info.world_size} on {info.device}, {cfg.precision}, "
            f"batch {self.plan.global_batch} = {info.world_size} ranks x {self.plan.accum_steps} x {self.plan.micro_batch}"
        )
        self.strategy.forward_model.train()
        status, reason = "completed", "reached max steps"
        try:
            while self.loop.step < self.total_steps:  # self.loop: a rollback replaces it
                batches = self._next_batches()
                if batches is None:
                    continue
                if self._train_step(batches) == "stop":
                    status, reason = "preempted", f"signal {self.faults.signal_name}"
                    break
        finally:
            self.console.close()
        return self._finish(status, reason)

    def _next_batches(self):
        """The micro-batches of one optimizer step; None at an epoch boundary or a skipped data window."""
        loop = self.loop
        if not hasattr(self, "_iter"):
            self.sampler.set_epoch(loop.epoch, loop.sample_in_epoch)
            self._iter = iter(self.loader)
        self.faults.beat(loop.step, "data")  # steps done so far: a rank stuck here shows as behind its peers
        t0 = time.perf_counter()
        try:
            batches = [next(self._iter) for _ in range(self.plan.accum_steps)]
        except StopIteration:
            loop.epoch, loop.sample_in_epoch = loop.epoch + 1, 0
            del self._iter
            return None
        finally:
            self.telemetry.add_data_time(time.perf_counter() - t0)
        if [loop.epoch, loop.sample_in_epoch] in loop.data_skips:  # the window that produced a NaN before a rollback
            loop.sample_in_epoch += self.plan.global_batch
            return None
        return batches

    def _train_step(self, batches) -> str | None:
        cfg, loop, info, strat, prec = self.cfg, self.loop, self.info, self.strategy, self.precision
        step = loop.step + 1
        self.faults.point("step", step)
        loss_sum = torch.zeros((), device=info.device)
        for m, (x, y) in enumerate(batches):
            x, y = x.to(info.device, non_blocking=True), y.to(info.device, non_blocking=True)
            last = m == len(batches) - 1
            self.faults.point(f"micro-{m}", step)  # inside the accumulation window
            with strat.no_sync(last):
                self.faults.beat(step, "forward")
                with prec.autocast():
                    loss = loss_fn(self.task, strat.forward_model(x), y) / len(batches)
                loss = self.faults.corrupt_loss(loss, step)
                self.faults.beat(step, "backward")
                prec.backward(loss)
            loss_sum += loss.detach()
        self.faults.beat(step, "optimizer")
        prec.unscale(self.optimizer)
        grad_norm = strat.grad_norm_and_clip(cfg.optim.grad_clip)
        self.faults.beat(step, "collective")
        bad, stop, minutes_due = self.faults.agree(loss_sum, grad_norm, prec.scaler is not None, self.saver.minutes_due())
        if bad:
            action = self.faults.on_nonfinite(step, loss_sum, grad_norm, loop, have_checkpoint=bool(self.saver.store.committed()))
            self.optimizer.zero_grad(set_to_none=True)
            if action == "rollback":
                self._rollback(step)
                return None
            loop.nan_skips += 1
        else:
            prec.step(self.optimizer)
            self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        loop.step, loop.sample_in_epoch = step, loop.sample_in_epoch + self.plan.global_batch
        loop.samples_seen += self.plan.global_batch
        loop.tokens_seen += self.plan.global_batch * self.data_info.tokens_per_sample
        self.telemetry.on_step(step, self.plan.global_batch, None if bad else loss_sum)
        if stop:
            self._save(emergency=True)
        elif self.saver.due(step) or minutes_due:
            self._save()
        if self.telemetry.due(step) or step == self.total_steps or stop:
            row = self.telemetry.log(step, lr=self.scheduler.get_last_lr()[0], grad_norm=float(grad_norm), epoch=self._epoch_float())
            self.last_loss = row["loss"]
            self.console.logged(row)
        self.console.step(step)
        if stop:
            return "stop"
        if cfg.run.eval_every_steps and step % cfg.run.eval_every_steps == 0 and step != self.total_steps:
            self._evaluate(step)
        return None

    def _epoch_float(self) -> float:
        per_epoch = self.sampler.steps_per_epoch() * self.plan.global_batch
        return self.loop.epoch + self.loop.sample_in_epoch / max(1, per_epoch)

    def _save(self, *, emergency: bool = False) -> None:
        self.faults.beat(self.loop.step, "checkpoint")
        self.loop.train_seconds += time.time() - self.t_start
        stall = self.saver.save(self.loop, blocking=emergency)
        self.loop.train_seconds -= time.time() - self.t_start  # counted in the summary's wall time instead
        self.telemetry.add_ckpt_time(stall)
        if self.saver.last_save_s is not None and not self._grace_checked:
            self._grace_checked = True
            self.saver.check_grace(self.console.print)

    def _rollback(self, bad_step: int) -> None:
        loop = self.loop
        window = [loop.epoch, loop.sample_in_epoch]
        self.saver.finish()  # an async save in flight must land before we choose what to load
        found = self.saver.latest()
        if found is None:
            raise RubinError(f"nan_policy=rollback at step {bad_step}, but no committed checkpoint exists to roll back to; "
                             "set checkpoint.every_steps or use nan_policy=skip")
        ckpt_step, path = found
        skips, rollbacks = loop.data_skips + [window], loop.rollbacks + 1
        self.loop = st.load(path, self.strategy, self.optimizer, self.scheduler, self.precision, self.info.rank, self.cfg.run.seed)
        self.loop.data_skips, self.loop.rollbacks = skips, rollbacks
        self.run.event("rollback", step=bad_step, to_step=ckpt_step, skipped_window=window, rollbacks=rollbacks)
        self.sampler.set_epoch(self.loop.epoch, self.loop.sample_in_epoch)
        self._iter = iter(self.loader)

    def _evaluate(self, step: int) -> dict | None:
        if self.eval_loader is None:
            return None
        self.faults.beat(step, "eval")
        t0 = time.perf_counter()
        result = evaluate(self.strategy.forward_model, self.eval_loader, self.task, self.info.device, self.precision, self.info)
        self.telemetry.exclude_time(time.perf_counter() - t0)
        row = {"step": step, **result}
        self.telemetry.log_eval(row)
        metric = f"accuracy {result['accuracy']:.4f}" if "accuracy" in result else f"perplexity {result['perplexity']:.2f}"
        self.console.print(f"eval step {step}: loss {result['eval_loss']:.4f}  {metric}")
        return row

    def _finish(self, status: str, reason: str) -> dict:
        loop = self.loop
        eval_row = None if status == "preempted" else self._evaluate(loop.step)
        if status == "completed" and self.cfg.checkpoint.save_final and self.saver.last_step != loop.step:
            self._save()
        self.saver.finish()
        self.faults.stop()
        digest = self.strategy.param_digest()
        wall = time.time() - self.t_start
        tele = self.telemetry.summary()
        latest = self.saver.latest() if self.info.is_main else None
        summary = {
            "status": status,
            "exit_reason": reason,
            "steps": loop.step,
            "final_loss": self.last_loss,
            "param_digest": digest,
            **tele,
            "eval": {k: v for k, v in (eval_row or {}).items() if k != "step"},
            "wall_s": wall,
            "world_size": self.info.world_size,
            "strategy": self.strategy.name,
            "precision": self.cfg.precision,
            "device": str(self.info.device),
            "samples_seen": loop.samples_seen,
            "tokens_seen": loop.tokens_seen,
            "nan_skips": loop.nan_skips,
            "rollbacks": loop.rollbacks,
            "fp16_overflow_skips": self.precision.skipped_steps,
            "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
            "run_dir": str(self.run.path),
            "checkpoint": str(latest[1]) if latest else None,
        }
        self.run.write_summary(summary)
        self.run.event("preempted" if status == "preempted" else "end", status=status, step=loop.step, reason=reason)
        self.telemetry.close()
        self.console.summary(summary, summary["checkpoint"])
        self.run.close()
        if status == "preempted":
            raise Preempted(f"preempted by {reason} at step {loop.step}: checkpoint committed; rerun the same command to resume")
        if math.isnan(summary["final_loss"] or 0.0):
            raise RubinError("training ended with a NaN loss")
        return summary
