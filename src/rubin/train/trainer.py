"""The training loop. It reads top to bottom; features hook in at named points.

    train(cfg) -> summary dict       (the library entry point; ``rubin train`` calls it)

One step: ``_next_batches`` -> ``_train_step`` (forward and backward per micro-batch through
``strategy.model``, clip, update; the step's loss and grad norm stay on the device) -> at a
check point, ``_after_check``: ``faults.check`` reads the flags of the steps since the last
check in one host sync -> NaN policy, preemption -> ``ckpt.maybe_save`` -> log -> eval.
"""

from __future__ import annotations

import math
import os
import sys
import time

import torch

from rubin.errors import ExitCode, RubinError
from rubin.train import build, distributed
from rubin.train.blocks import find_blocks, missing_warning
from rubin.train.checkpointing import Checkpointer, TrainState, reseed
from rubin.train.console import Console
from rubin.train.data import GlobalBatchSampler, eval_loader, plan_batches, shut_down_workers, train_loader
from rubin.train.faults import PreemptionHandler, fault_point
from rubin.train.faults.hooks import FaultHooks, StepFlags
from rubin.train.flops import obtain as obtain_flops
from rubin.train.gcpolicy import GcPolicy
from rubin.train.optim import build_optimizer, build_scheduler
from rubin.train.precision import Precision
from rubin.train.sinks import build_sinks
from rubin.train.sinks import require as require_sinks
from rubin.train.strategy import Strategy, resolve
from rubin.train.task import Objective, evaluate
from rubin.train.telemetry import Telemetry


class Preempted(RubinError):
    exit_code = ExitCode.PREEMPTED


def train(cfg, *, force: bool = False, resume: bool = True, quiet: bool = False) -> dict:
    info = distributed.setup(cfg)
    # Signals are caught from here, not from the first step: a SIGTERM or Slurm's SIGUSR1 warning
    # during setup (a restore can take minutes) is then a stop at the first check (one step, an
    # emergency save, exit 75) instead of the default action killing the rank.
    preempt = PreemptionHandler().install()
    ok, trainer = False, None
    try:
        trainer = Trainer(cfg, info, force=force, resume=resume, quiet=quiet, preempt=preempt)
        summary = trainer.fit()
        ok = True
        return summary
    except Preempted:
        ok = True  # every rank agreed to stop and saved: the group is healthy, tear down cleanly
        raise
    except Exception as err:
        from rubin.workloads import blame
        from rubin.workloads.imports import blame_first_step

        blamed = blame(err)  # raised inside the user's factory, dataset or forward: their error, exit 2
        if blamed is None and trainer is not None and trainer.loop.step == trainer.start_step:
            blamed = blame_first_step(err, [f"{k}={v!r}" for k, v in (("model.import", cfg.model.import_),
                                                                       ("data.import", cfg.data.import_)) if v])
        if trainer is not None:
            trainer.settle_save()
            trainer.record_failure(blamed or err)
        if blamed is not None:
            raise blamed from err
        raise
    finally:
        if trainer is not None:  # on every exit path: live workers must never outlive the run or block the exit
            shut_down_workers(getattr(trainer, "_iter", None), getattr(trainer, "loader", None), getattr(trainer, "eval_loader", None))
            if not ok:
                trainer.close()
        preempt.uninstall()  # a second call after FaultHooks.stop changes nothing
        if ok:
            distributed.teardown(info)
        else:
            distributed.abort(info)


class Trainer:
    def __init__(self, cfg, info, *, force: bool, resume: bool, quiet: bool, preempt: PreemptionHandler | None = None):
        self.cfg, self.info, self.t_start, self.preempt = cfg, info, time.time(), preempt
        self.run, self._held_warnings = None, []  # warnings before the run dir and console exist wait here
        self.last_loss: float | None = None
        torch.manual_seed(cfg.run.seed)  # same initial weights on every rank
        if cfg.run.deterministic:
            if info.device.type == "cuda":
                os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True)
        # -- bad input is found here, before the run dir is touched --
        self.plan = plan_batches(cfg.data.batch_size, cfg.data.micro_batch_size, info.world_size)
        train_ds, eval_ds, self.data_info = build.build_data(cfg, cache_dir=str(cfg.run_dir))
        self.task = cfg.data.task or self.data_info.task
        model = build.build_model(cfg, self.data_info)
        found_blocks, self.blocks_how = find_blocks(model, cfg.distributed.blocks)  # a bad distributed.blocks stops here
        self.sampler = GlobalBatchSampler(len(train_ds), self.plan, info.rank, seed=cfg.run.seed)
        self.total_steps = build.total_steps(cfg, self.sampler.steps_per_epoch())
        require_sinks(cfg.telemetry.sinks)
        self.console = Console(enabled=info.is_main and not quiet, total_steps=self.total_steps)
        self.completed = distributed.broadcast_object(info, build.completed_run(cfg, self.total_steps, resume=resume, force=force)
                                                      if info.is_main else None)
        if self.completed is not None:
            return  # rerunning a finished run: nothing is touched
        self.run, resuming = build.open_run_dir(cfg, info, force=force, resume=resume)
        # -- the run exists from here on: a start that fails below still frees it (lock, files, handlers) --
        try:
            self._set_up(model, found_blocks, train_ds, eval_ds, resuming=resuming, force=force)
        except BaseException:
            self.close()
            raise

    def _set_up(self, model, found_blocks, train_ds, eval_ds, *, resuming: bool, force: bool) -> None:
        cfg, info = self.cfg, self.info
        from rubin.platform.fingerprint import fingerprint

        self.env = fingerprint(str(self.run.path)) if info.is_main else {}
        self.run.write_env(self.env)
        name = resolve(cfg.distributed.strategy, info.world_size)
        self.flops = obtain_flops(model, self.data_info, train_ds, self.plan.micro_batch, self.task)  # before wrapping: meta copies
        if self.flops.source == "unavailable":
            self._warn(f"could not count the model's FLOPs ({self.flops.detail}): MFU is not reported; "
                       "give the model a flops_per_sample attribute or method")
        self.objective = Objective(self.task, self.data_info.vocab_size if self.task == "lm" else self.data_info.num_classes,
                                   model, warn=self._warn)
        self.strategy = Strategy(
            name, model, info, blocks=self._blocks(found_blocks, name),
            compile=cfg.distributed.compile, act_ckpt=cfg.distributed.activation_checkpointing,
        )
        self.optimizer = build_optimizer(self.strategy.model, cfg.optim)
        self.state = TrainState(self.strategy, self.optimizer, build_scheduler(self.optimizer, cfg.optim, self.total_steps),
                                Precision(cfg.precision, info.device))
        self.loader = train_loader(train_ds, self.sampler, cfg.data, info.device, cfg.run.seed)
        eval_batch = cfg.data.eval_batch_size or self.plan.micro_batch
        self.eval_loader = None if eval_ds is None else eval_loader(eval_ds, info.rank, info.world_size, eval_batch, cfg.data, info.device)
        self.telemetry = Telemetry(
            cfg, info, self.run, build_sinks(cfg.telemetry.sinks, self.run, cfg.model_dump(mode="json", by_alias=True)),
            flops_per_sample=self.flops.per_sample,
            tokens_per_sample=self.data_info.tokens_per_sample, precision=cfg.precision,
        )
        self.faults = FaultHooks(cfg, info, self.run, fp16=self.state.precision.scaler is not None, preempt=self.preempt)
        if self.faults.spikes is not None:
            self.state.extras["spikes"] = self.faults.spikes  # its running median survives a resume or rollback
        self.ckpt = Checkpointer(cfg, info, self.run, self.state, env=self.env, barrier=lambda: distributed.barrier(info),
                                 say=self.console.print, beat=lambda step: self.faults.beat(step, "checkpoint"))
        reseed(cfg.run.seed, info.rank)
        for message in self._held_warnings:
            self.console.print(f"warning: {message}")
        if resuming:
            self.ckpt.restore_latest(force=force)  # checkpoints that all fail to verify: refused unless --force
        self.start_step = self.loop.step  # before a step of this process ends, an error may be the user's
        self.console.start_at(self.loop.step)
        fault_point("setup", self.loop.step, info.rank)  # a signal during setup, for the tests

    def close(self) -> None:
        """Give back what a run holds, on a path that did not reach ``_finish``: signal handlers and
        watchdog, metric sinks, the run dir's files and lock. Safe to call twice; never raises."""
        for part, method in (("faults", "stop"), ("telemetry", "close")):
            obj = getattr(self, part, None)
            if obj is not None:
                try:
                    getattr(obj, method)()
                except Exception:  # noqa: BLE001 - cleaning up after a failure must not replace it
                    pass
        if self.run is not None:
            self.run.close()

    def settle_save(self) -> None:
        """After a failure: let a save already in flight commit before the process exits (its writer
        is a daemon thread that exit would cut off). One rank only: with peers, the commit waits for
        theirs, which may be gone, and an elastic restart resumes from the last committed one anyway."""
        writer = getattr(getattr(self, "ckpt", None), "async_writer", None)
        step = writer.inflight_step if writer is not None and self.info.world_size == 1 else None
        if step is None:
            return
        # stderr even under --quiet: it says why the exit waits
        print(f"rubin: waiting for the checkpoint of step {step} to commit before exiting", file=sys.stderr, flush=True)
        try:
            writer.wait()
        except Exception as err:  # noqa: BLE001 - the failure being reported comes first
            print(f"rubin: warning: that checkpoint did not commit: {err}", file=sys.stderr)

    @property
    def loop(self):
        return self.state.loop  # a rollback replaces it

    def record_failure(self, err: BaseException) -> None:
        """A run that fails mid-way still says so: summary.json with status failed, and an end event."""
        try:
            error = str(err) if isinstance(err, RubinError) else f"{type(err).__name__}: {err}"
            self.run.write_summary({"status": "failed", "exit_reason": "error", "error": error.splitlines()[0] if error else "",
                                    "steps": self.loop.step, "final_loss": self.last_loss, "world_size": self.info.world_size,
                                    "run_dir": str(self.run.path), "wall_s": time.time() - self.t_start, **self.flops.as_dict()})
            self.run.event("end", status="failed", step=self.loop.step, reason=error)
        except Exception:  # noqa: BLE001 - reporting the failure must not hide it
            pass

    def _warn(self, message: str) -> None:
        """A warning is a ``warning`` event and one console line; never silent."""
        if self.run is not None:
            self.run.event("warning", message=message)
        if getattr(self, "console", None) is None:
            self._held_warnings.append(message)
        else:
            self.console.print(f"warning: {message}")

    def _blocks(self, found: list, strategy: str) -> list:
        if not found:
            message = missing_warning(strategy, self.cfg.distributed.activation_checkpointing)
            if message:
                self._warn(message)
        return found

    # ------------------------------------------------------------------------------------
    def fit(self) -> dict:
        if self.completed is not None:
            s = self.completed
            self.console.print(f"run dir {s.get('run_dir') or str(self.cfg.run_dir)!r} is already complete at step {s.get('steps')}: "
                               "nothing to do (use another run.dir, or --force to start over)")
            self.console.summary(s, s.get("checkpoint"))
            return s
        cfg, loop, info = self.cfg, self.loop, self.info
        self.run.event("start", step=loop.step, total_steps=self.total_steps, world_size=info.world_size,
                       strategy=self.strategy.name, precision=cfg.precision, device=str(info.device),
                       restart_count=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)), blocks=self.blocks_how,
                       **self.flops.as_dict())
        restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
        if restarts:
            self.run.event("restart", restart_count=restarts, step=loop.step)
        self.faults.start(loop.step)
        self.console.print(
            f"rubin train: {cfg.model.import_ or cfg.model.name} on {cfg.data.import_ or cfg.data.name}, "
            f"{self.total_steps} steps, {self.strategy.name} x{info.world_size} on {info.device}, {cfg.precision}, "
            f"batch {self.plan.global_batch} = {info.world_size} ranks x {self.plan.accum_steps} x {self.plan.micro_batch}"
        )
        self.strategy.model.train()
        status, reason = "completed", "reached max steps"
        gc_policy = GcPolicy(cfg.run.gc_every_steps)
        try:
            gc_policy.start()
            while self.loop.step < self.total_steps:
                batches = self._next_batches()
                if batches is None:
                    continue
                if self._train_step(batches) == "stop":
                    status, reason = "preempted", self.faults.stop_reason
                    break
                gc_policy.step(self.loop.step)
        finally:
            gc_policy.stop()
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
        cfg, loop, info, model, prec = self.cfg, self.loop, self.info, self.strategy.model, self.state.precision
        step = loop.step + 1
        self.faults.point("step", step)
        losses, n = [], len(batches)
        for m, (x, y) in enumerate(batches):
            x, y = x.to(info.device, non_blocking=True), y.to(info.device, non_blocking=True)
            self.faults.point(f"micro-{m}", step)  # inside the accumulation window
            with self.strategy.no_sync(m == n - 1):
                self.faults.beat(step, "forward")
                with prec.autocast():
                    loss = self.objective(model, x, y)
                    loss = loss / n if n > 1 else loss  # no extra kernel (and backward node) without accumulation
                loss = self.faults.corrupt_loss(loss, step)
                self.faults.beat(step, "backward")
                prec.backward(loss)
            losses.append(loss.detach())
        loss_sum = losses[0] if n == 1 else torch.stack(losses).float().sum()
        self.faults.beat(step, "optimizer")
        prec.unscale(self.optimizer)
        grad_norm = self.strategy.grad_norm_and_clip(cfg.optim.grad_clip)
        self.faults.record(step, [loop.epoch, loop.sample_in_epoch], loss_sum, grad_norm)
        skipped = False
        if self.faults.check_before_update:  # nan_policy=skip must know before the update: one host sync per step
            flags = self.faults.check(step, self.ckpt.minutes_due())
            skipped = flags.bad_step is not None and self.faults.on_nonfinite(flags, loop, have_checkpoint=True) == "skip"
            checked = flags
        else:
            checked = None
        if skipped:
            loop.nan_skips += 1
        else:
            prec.step(self.optimizer)
        self.optimizer.zero_grad(set_to_none=True)
        self.state.scheduler.step()
        loop.step, loop.sample_in_epoch = step, loop.sample_in_epoch + self.plan.global_batch
        loop.samples_seen += self.plan.global_batch
        loop.tokens_seen += self.plan.global_batch * self.data_info.tokens_per_sample
        self.telemetry.on_step(step, self.plan.global_batch, None if skipped else loss_sum)
        log_due = self.telemetry.due(step) or step == self.total_steps
        eval_due = bool(cfg.run.eval_every_steps and step % cfg.run.eval_every_steps == 0 and step != self.total_steps)
        if checked is None and (log_due or eval_due or self.ckpt.due(step) or self.faults.check_due(step)):
            checked = self.faults.check(step, self.ckpt.minutes_due())
        return None if checked is None else self._after_check(step, checked, grad_norm, log_due, eval_due)

    def _after_check(self, step: int, flags: StepFlags, grad_norm, log_due: bool, eval_due: bool) -> str | None:
        """The flags of every step up to STEP are read: NaN policy, then save, log and eval."""
        if flags.bad_step is not None and not self.faults.check_before_update:
            # rollback or halt: no checkpoint was saved since the bad step, since every save is checked first
            self.faults.on_nonfinite(flags, self.loop, have_checkpoint=self.ckpt.has_checkpoint())
            self._rollback(flags)
            return None
        if flags.stop:  # from the moment the emergency save commits, exit 75 whatever signal comes next
            self.faults.preempt.settle_when(lambda: self.ckpt.committed(step))
        self.telemetry.add_ckpt_time(self.ckpt.maybe_save(step, force=flags.save, emergency=flags.stop))
        if flags.stop:
            self.faults.preempt.settle()
        if log_due or flags.stop:
            row = self.telemetry.log(step, lr=self.state.scheduler.get_last_lr()[0], grad_norm=float(grad_norm), epoch=self._epoch_float())
            self.last_loss = row["loss"]
            self.console.logged(row)
        if flags.stop:
            return "stop"
        if eval_due:
            self._evaluate(step)
        return None

    def _epoch_float(self) -> float:
        per_epoch = self.sampler.steps_per_epoch() * self.plan.global_batch
        return self.loop.epoch + self.loop.sample_in_epoch / max(1, per_epoch)

    def _rollback(self, flags: StepFlags) -> None:
        skips, rollbacks = self.loop.data_skips + [flags.position], self.loop.rollbacks + 1
        to_step = self.ckpt.restore_latest(announce=False)
        if to_step is None:
            raise RubinError(f"nan_policy=rollback at step {flags.bad_step}, but no committed checkpoint exists to roll back to; "
                             "set checkpoint.every_steps or use nan_policy=skip")
        self.loop.data_skips, self.loop.rollbacks = skips, rollbacks
        self.run.event("rollback", step=flags.bad_step, to_step=to_step, skipped_window=flags.position, rollbacks=rollbacks)
        self.telemetry.drop_losses()  # the interval's losses include the steps being undone
        self.faults.rewind(self.loop.step)
        self.sampler.set_epoch(self.loop.epoch, self.loop.sample_in_epoch)
        self._iter = iter(self.loader)

    def _evaluate(self, step: int) -> dict | None:
        if self.eval_loader is None:
            return None
        self.faults.beat(step, "eval")
        t0 = time.perf_counter()
        result = evaluate(self.strategy.model, self.eval_loader, self.task, self.info.device, self.state.precision, self.info)
        self.telemetry.exclude_time(time.perf_counter() - t0)
        row = {"step": step, **result}
        self.telemetry.log_eval(row)
        metric = f"accuracy {result['accuracy']:.4f}" if "accuracy" in result else f"perplexity {result['perplexity']:.2f}"
        self.console.print(f"eval step {step}: loss {result['eval_loss']:.4f}  {metric}")
        return row

    def _finish(self, status: str, reason: str) -> dict:
        loop = self.loop
        eval_row = None if status == "preempted" else self._evaluate(loop.step)
        if status == "completed" and self.cfg.checkpoint.save_final:
            self.telemetry.add_ckpt_time(self.ckpt.maybe_save(loop.step, force=True))
        self.ckpt.wait()
        self.faults.stop()
        digest = self.strategy.param_digest()
        wall = time.time() - self.t_start
        tele = self.telemetry.summary()
        latest = self.ckpt.latest() if self.info.is_main else None
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
            "fp16_overflow_skips": self.state.precision.skipped_steps,
            "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)),
            "run_dir": str(self.run.path),
            "checkpoint": str(latest[1]) if latest else None,
            **self.flops.as_dict(),
        }
        self.run.write_summary(summary)
        if status == "preempted":
            self.run.event("preempted", status=status, step=loop.step, reason=reason, reaction_s=self.faults.reaction_s)
        else:
            self.run.event("end", status=status, step=loop.step, reason=reason)
        self.telemetry.close()
        self.console.summary(summary, summary["checkpoint"])
        self.run.close()
        if status == "preempted":
            raise Preempted(f"preempted by {reason} at step {loop.step}: checkpoint committed; rerun the same command to resume")
        if math.isnan(summary["final_loss"] or 0.0):
            raise RubinError("training ended with a NaN loss")
        return summary
