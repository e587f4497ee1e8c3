"""The training loop. It reads top to bottom; features hook in at named points.

    train(cfg, console=...) -> summary dict   (the library entry point; ``rubin train`` calls it)

One step: ``_next_batches`` -> ``_train_step`` (forward, backward, update; one ``faults.phase`` each;
loss and grad norm stay on the device) -> ``_after_step``: at a check point, ``faults.flags_after``
(one host sync) -> NaN policy, preemption -> ``ckpt.maybe_save`` -> log -> eval.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time

import torch

from rubin.errors import Preempted, RubinError
from rubin.platform.fingerprint import fingerprint
from rubin.train import build, distributed
from rubin.train import speed as speedups
from rubin.train.checkpoint.checkpointer import Checkpointer, TrainState, reseed
from rubin.train.data import GlobalBatchSampler, StepBatches, eval_loader, plan_batches, shut_down_workers, train_loader
from rubin.train.faults import PreemptionHandler, fault_point
from rubin.train.faults.policy import FaultPolicy, StepFlags
from rubin.train.gcpolicy import GcPolicy
from rubin.train.hosts import PeerLost, lost_peer
from rubin.train.observe import profiling
from rubin.train.observe.console import Console
from rubin.train.observe.sinks import build_sinks
from rubin.train.observe.sinks import require as require_sinks
from rubin.train.observe.telemetry import Telemetry
from rubin.train.strategy import Precision, Strategy, build_optimizer, build_scheduler, needs_group, resolve
from rubin.train.task import evaluate
from rubin.workloads.contract.blocks import find_blocks, missing_warning
from rubin.workloads.contract.flops import obtain as obtain_flops
from rubin.workloads.contract.outputs import Objective


def train(cfg, *, force: bool = False, resume: bool = True, console: Console | None = None) -> dict:
    """Train CFG to the end (or a preemption: ``Preempted``, exit 75). CONSOLE is the caller's (the CLI's);
    without one, nothing but warnings is shown."""
    console = console or Console(quiet=True)
    info = distributed.detect()
    # resolved once, here: a strategy this launch cannot run is bad input, refused before the group forms
    strategy = resolve(cfg.distributed.strategy, info.world_size, info.source)
    distributed.setup(cfg, info, group=needs_group(strategy))
    # Signals are caught from here, not from the first step: a SIGTERM or Slurm's SIGUSR1 warning
    # during setup (a restore can take minutes) is then a stop at the first check (one step, an
    # emergency save, exit 75) instead of the default action killing the rank.
    preempt = PreemptionHandler().install()
    ok, trainer = False, None
    try:
        trainer = Trainer(cfg, info, strategy, force=force, resume=resume, console=console, preempt=preempt)
        summary = trainer.fit()
        ok = True
        return summary
    except Preempted:
        ok = True  # every rank agreed to stop and saved: the group is healthy, tear down cleanly
        raise
    except Exception as err:
        first_step = trainer is not None and trainer.loop.step == trainer.start_step
        failure = build.blame(cfg, err, first_step=first_step)  # the user's code failed: their error, exit 2
        if trainer is not None:
            failure = trainer.record_failure(failure or err)
        failure = failure if failure is not err else None
        if failure is None and trainer is None:  # a peer lost before the run started
            failure = lost_peer(err, info.hosts, info.rank, 0, None)
        if failure is not None:
            raise failure from err
        raise
    finally:
        if trainer is not None:
            trainer.stop_workers()
            if not ok:
                trainer.close()
        preempt.uninstall()  # a second call after FaultPolicy.stop changes nothing
        if ok:
            distributed.teardown(info)
        else:
            distributed.abort(info)


class Trainer:
    def __init__(self, cfg, info, strategy: str, *, force: bool, resume: bool, console: Console,
                 preempt: PreemptionHandler):
        self.cfg = cfg
        self.info = info
        self.strategy_name = strategy  # resolved by train(), once
        self.t_start = time.time()
        self.preempt = preempt
        self.console = console
        self.run = None
        self.last_loss = None
        build.seed(cfg, info)
        # -- bad input is found here, before the run dir is touched --
        self.plan = plan_batches(cfg.data.batch_size, cfg.data.micro_batch_size, info.world_size)
        train_ds, eval_ds, self.data_info = build.build_data(cfg, cache_dir=str(cfg.run_dir))
        self.task = cfg.data.task or self.data_info.task
        model = build.build_model(cfg, self.data_info)
        found_blocks, self.blocks_how = find_blocks(model, cfg.distributed.blocks)  # bad distributed.blocks: stops here
        self.sampler = GlobalBatchSampler(len(train_ds), self.plan, info.rank, seed=cfg.run.seed)
        self.total_steps = build.total_steps(cfg, self.sampler.steps_per_epoch())
        require_sinks(cfg.telemetry.sinks)
        profiling.check(cfg, self.total_steps)  # a profile window past the run's end: exit 2, nothing touched
        self.console.begin(self.total_steps, main=info.is_main)
        done = build.completed_run(cfg, self.total_steps, resume=resume, force=force) if info.is_main else None
        self.completed = distributed.broadcast_object(info, done)
        if self.completed is not None:
            return  # rerunning a finished run: nothing is touched
        self.run, resuming = build.open_run_dir(cfg, info, force=force, resume=resume, warn=self.console.warn)
        # -- the run exists from here on: a start that fails below still frees it (lock, files, handlers) --
        try:
            self._set_up(model, found_blocks, train_ds, eval_ds, resuming=resuming, force=force)
        except BaseException:
            self.close()
            raise

    def _set_up(self, model, found_blocks, train_ds, eval_ds, *, resuming: bool, force: bool) -> None:
        cfg, info = self.cfg, self.info
        self.env = fingerprint(str(self.run.path)) if info.is_main else {}
        if info.determinism and info.is_main:
            self.env["determinism"] = info.determinism
        self.run.write_env(self.env)
        for note in info.notes:  # what setup chose on this node's behalf (a socket interface) or found (a clock)
            self.run.event("warning", message=note)
            if info.local_rank == 0:  # each node says what it chose, whichever rank is the main one
                self.console.warn(note)
        name = self.strategy_name
        # before wrapping: counted on meta copies
        self.flops = obtain_flops(model, self.data_info, train_ds, self.plan.micro_batch, self.task)
        if self.flops.warning:
            self._warn(self.flops.warning)
        classes = self.data_info.vocab_size if self.task == "lm" else self.data_info.num_classes
        act_ckpt = cfg.distributed.activation_checkpointing
        if not found_blocks and missing_warning(name, act_ckpt):
            self._warn(missing_warning(name, act_ckpt))
        self.speed = speedups.prepare(cfg, model, info.device, self.task, self.run.path, micro_batch=self.plan.micro_batch,
                                      tokens_per_sample=self.data_info.tokens_per_sample, warn=self._warn)
        self.strategy = Strategy(name, model, info, blocks=found_blocks, compile=self.speed.compile, act_ckpt=act_ckpt)
        self.optimizer = build_optimizer(self.strategy.model, cfg.optim, info.device)
        scheduler = build_scheduler(self.optimizer, cfg.optim, self.total_steps)
        self.state = TrainState(self.strategy, self.optimizer, scheduler, Precision(cfg.precision, info.device))
        loader = train_loader(train_ds, self.sampler, cfg.data, info.device, cfg.run.seed)
        self.batches = StepBatches(loader, self.sampler, self.plan, info.device)
        eval_batch = cfg.data.eval_batch_size or self.plan.micro_batch
        self.eval_loader = None if eval_ds is None else eval_loader(eval_ds, info.rank, info.world_size, eval_batch,
                                                                    cfg.data, info.device)
        resolved = cfg.model_dump(mode="json", by_alias=True)
        sinks = build_sinks(cfg.telemetry.sinks, self.run, resolved, warn=self.console.warn)
        self.telemetry = Telemetry(cfg, info, self.run, sinks, flops_per_sample=self.flops.per_sample,
                                   tokens_per_sample=self.data_info.tokens_per_sample, precision=cfg.precision)
        fp16 = self.state.precision.scaler is not None
        self.faults = FaultPolicy(cfg, info, self.run, fp16=fp16, preempt=self.preempt, say=self.console.notice)
        objective = Objective(self.task, classes, model, warn=self._warn, head=self.speed.head)
        self.objective = self.faults.objective(objective)
        if self.faults.spikes is not None:
            self.state.extras["spikes"] = self.faults.spikes  # its running median survives a resume or rollback
        self.ckpt = Checkpointer(cfg, info, self.run, self.state, env=self.env, console=self.console,
                                 heartbeat=self.faults.heartbeat)
        self.profile = profiling.build(cfg, info, self.run, total_steps=self.total_steps, say=self.console.notice)
        reseed(cfg.run.seed, info.rank)
        if resuming:
            self.ckpt.restore_latest(force=force)  # checkpoints that all fail to verify: refused unless --force
        self.start_step = self.loop.step  # before a step of this process ends, an error may be the user's
        self.console.start_at(self.loop.step)
        fault_point("setup", self.loop.step, info.rank)  # a signal during setup, for the tests

    def stop_workers(self) -> None:
        """On every exit path: live DataLoader workers must never outlive the run or block its exit."""
        batches = getattr(self, "batches", None)
        shut_down_workers(*(batches.iterator, batches.loader) if batches else (), getattr(self, "eval_loader", None))

    def close(self) -> None:
        """Give back what a run holds, on a path that did not reach ``_finish``: signal handlers and
        watchdog, metric sinks, the run dir's files and lock. Safe to call twice; never raises."""
        for obj, method in ((getattr(self, "faults", None), "stop"), (getattr(self, "telemetry", None), "close")):
            with contextlib.suppress(Exception):  # cleaning up after a failure must not replace it
                getattr(obj, method, lambda: None)()
        if self.run is not None:
            self.run.close()

    @property
    def loop(self):
        return self.state.loop  # a rollback replaces it

    def record_failure(self, err: BaseException) -> BaseException:
        """A run that fails mid-way still says so: summary.json with status failed, and an end event.
        An async save in flight commits first (``Checkpointer.settle``). A peer that went away becomes
        ``PeerLost`` (one line, exit 75, ``retry`` in the summary), which is returned to be raised."""
        ckpt = getattr(self, "ckpt", None)
        if ckpt is not None:
            ckpt.settle()
        err = lost_peer(err, self.info.hosts, self.info.rank, self.loop.step, ckpt and ckpt.last_step) or err
        with contextlib.suppress(Exception):  # reporting the failure must not hide it
            error = str(err) if isinstance(err, RubinError) else f"{type(err).__name__}: {err}"
            retry = {"retry": True} if isinstance(err, PeerLost) else {}
            self.run.write_summary({
                "status": "failed", "exit_reason": getattr(err, "exit_reason", "error"), **retry,
                "error": error.splitlines()[0] if error else "",
                "steps": self.loop.step, "final_loss": self.last_loss, "world_size": self.info.world_size,
                "run_dir": str(self.run.path), "wall_s": time.time() - self.t_start, **self.flops.as_dict()})
            self.run.event("end", status="failed", step=self.loop.step, reason=error)
        return err

    def _warn(self, message: str) -> None:  # an event and a console line: never silent
        if self.run is not None:
            self.run.event("warning", message=message)
        self.console.print(f"warning: {message}")

    def fit(self) -> dict:
        if self.completed is not None:
            self.console.already_complete(self.completed, str(self.cfg.run_dir))
            return self.completed
        cfg, loop, info = self.cfg, self.loop, self.info
        restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
        self.run.event("start", step=loop.step, total_steps=self.total_steps, world_size=info.world_size,
                       strategy=self.strategy.name, precision=cfg.precision, device=str(info.device),
                       restart_count=restarts, blocks=self.blocks_how, **self.flops.as_dict())
        if restarts:
            self.run.event("restart", restart_count=restarts, step=loop.step)
        self.faults.start(loop.step)
        self.console.started(cfg, self.strategy.name, info, self.plan, self.total_steps)
        self.strategy.model.train()
        status, reason = "completed", "reached max steps"
        gc_policy = GcPolicy(cfg.run.gc_every_steps)
        try:
            gc_policy.start()
            while self.loop.step < self.total_steps:
                self.profile.step(self.loop.step)
                batches = self._next_batches()
                if batches is None:
                    continue
                if self._step(batches) == "stop":
                    status, reason = "preempted", self.faults.stop_reason
                    break
                gc_policy.step(self.loop.step)
        finally:
            gc_policy.stop()
            # a window cut short (preemption, crash) still writes the steps it traced
            self.profile.close("failed" if sys.exc_info()[0] else status, self.loop.step)
            self.console.close()
        return self._finish(status, reason)

    def _next_batches(self):
        """The micro-batches of one optimizer step; None at an epoch boundary or a skipped data window."""
        self.faults.beat(self.loop.step, "data")  # steps done so far: a rank stuck here shows as behind its peers
        t0 = time.perf_counter()
        try:
            return self.batches.next(self.loop)
        finally:
            self.telemetry.add_data_time(time.perf_counter() - t0)

    def _step(self, batches) -> str | None:
        """One optimizer step and what follows it; "stop" when the run must end here (preempted)."""
        if self.speed.pending_first_step:  # after compiling: timed on its own, eager again if the compiler fails
            return self._after_step(*speedups.first_step(self.speed, lambda: self._train_step(batches), self))
        return self._after_step(*self._train_step(batches))

    def _train_step(self, batches) -> tuple:
        model, prec, faults, n = self.strategy.model, self.state.precision, self.faults, len(batches)
        step, losses = self.loop.step + 1, []
        for m, (x, y) in enumerate(batches):
            x, y = x.to(self.info.device, non_blocking=True), y.to(self.info.device, non_blocking=True)
            with self.strategy.no_sync(m == n - 1):
                with faults.phase(step, "forward", micro=m), prec.autocast():
                    loss = self.objective(model, x, y)
                    loss = loss / n if n > 1 else loss  # no extra kernel (and backward node) without accumulation
                with faults.phase(step, "backward"):
                    prec.backward(loss)
            losses.append(loss.detach())
        loss_sum = losses[0] if n == 1 else torch.stack(losses).float().sum()
        with faults.phase(step, "optimizer"):
            prec.unscale(self.optimizer)
            grad_norm = self.strategy.grad_norm_and_clip(self.cfg.optim.grad_clip)
            updated = faults.allows_update(step, self.loop, loss_sum, grad_norm, save_due=self.ckpt.minutes_due)
            if updated:
                prec.step(self.optimizer)
            self.optimizer.zero_grad(set_to_none=True)
            self.state.scheduler.step()
        return step, loss_sum, grad_norm, updated

    def _after_step(self, step: int, loss_sum, grad_norm, updated: bool) -> str | None:
        """Advance the loop position; at a check point, the NaN policy, then save, log and eval."""
        batch = self.plan.global_batch
        self.loop.advance(step, batch, batch * self.data_info.tokens_per_sample)
        self.telemetry.on_step(step, batch, loss_sum if updated else None)
        log_due = self.telemetry.due(step) or step == self.total_steps
        every = self.cfg.run.eval_every_steps
        eval_due = bool(every and step % every == 0 and step != self.total_steps)
        due = log_due or eval_due or self.ckpt.due(step)
        flags = self.faults.flags_after(step, due=due, save_due=self.ckpt.minutes_due)
        return None if flags is None else self._after_check(step, flags, grad_norm, log_due, eval_due)

    def _after_check(self, step: int, flags: StepFlags, grad_norm, log_due: bool, eval_due: bool) -> str | None:
        """The flags of every step up to STEP are read: NaN policy, then save, log and eval."""
        # rollback or halt: no checkpoint was saved since the bad step, since every save is checked first
        if self.faults.on_bad_step(flags, self.loop, have_checkpoint=self.ckpt.has_checkpoint()):
            self._rollback(flags)
            return None
        if flags.stop:  # from the moment the emergency save commits, exit 75 whatever signal comes next
            self.faults.preempt.settle_when(lambda: self.ckpt.committed(step))
        self.telemetry.add_ckpt_time(self.ckpt.maybe_save(step, force=flags.save, emergency=flags.stop))
        if flags.stop:
            self.faults.preempt.settle()
        if log_due or flags.stop:
            lr = self.state.scheduler.get_last_lr()[0]
            row = self.telemetry.log(step, lr=lr, grad_norm=float(grad_norm), epoch=self.batches.epoch_float(self.loop))
            self.last_loss = row["loss"]
            self.console.logged(row)
        if flags.stop:
            return "stop"
        if eval_due:
            self._evaluate(step)
        return None

    def _rollback(self, flags: StepFlags) -> None:
        self.ckpt.roll_back(flags.bad_step, flags.position)
        self.telemetry.drop_losses()  # the interval's losses include the steps being undone
        self.faults.rewind(self.loop.step)
        self.batches.restart(self.loop)

    def _evaluate(self, step: int) -> dict | None:
        if self.eval_loader is None:
            return None
        self.faults.beat(step, "eval")
        t0 = time.perf_counter()
        result = speedups.checked(self.speed, lambda: evaluate(self.strategy.model, self.eval_loader, self.task,
                                                               self.info.device, self.state.precision, self.info),
                                  self, during="evaluation")
        self.telemetry.exclude_time(time.perf_counter() - t0)
        row = {"step": step, **result}
        self.telemetry.log_eval(row)
        self.console.evaluated(step, result)
        return row

    def _finish(self, status: str, reason: str) -> dict:
        loop = self.loop
        eval_row = None if status == "preempted" else self._evaluate(loop.step)
        if status == "completed" and self.cfg.checkpoint.save_final:
            self.telemetry.add_ckpt_time(self.ckpt.maybe_save(loop.step, force=True))
        self.ckpt.wait()
        self.faults.stop()
        speedups.note_fallbacks(self.speed, self)  # the summary says what dynamo really compiled
        latest = self.ckpt.latest() if self.info.is_main else None
        loop_counts = {k: getattr(loop, k) for k in ("samples_seen", "tokens_seen", "nan_skips", "rollbacks")}
        summary = {
            "status": status, "exit_reason": reason, "steps": loop.step, "final_loss": self.last_loss,
            "param_digest": self.strategy.param_digest(), **self.telemetry.summary(),
            "eval": {k: v for k, v in (eval_row or {}).items() if k != "step"},
            "wall_s": time.time() - self.t_start, "world_size": self.info.world_size, "strategy": self.strategy.name,
            "precision": self.cfg.precision, "device": str(self.info.device), **loop_counts,
            "fp16_overflow_skips": self.state.precision.skipped_steps,
            "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)), "run_dir": str(self.run.path),
            "checkpoint": str(latest[1]) if latest else None, **self.flops.as_dict(),
            **self.faults.straggler_summary(), **self.speed.summary(),  # compile_s: not in samples_per_s or mfu
        }
        self.run.write_summary(summary)
        extra = {"reaction_s": self.faults.reaction_s} if status == "preempted" else {}
        self.run.event("preempted" if extra else "end", status=status, step=loop.step, reason=reason, **extra)
        self.telemetry.close()
        self.console.summary(summary, summary["checkpoint"])
        self.run.close()
        if status == "preempted":
            raise Preempted(f"preempted by {reason} at step {loop.step}: checkpoint committed; "
                            "rerun the same command to resume")
        if math.isnan(summary["final_loss"] or 0.0):
            raise RubinError("training ended with a NaN loss")
        return summary
