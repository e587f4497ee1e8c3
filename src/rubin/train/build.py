"""Everything built before the first step: data, model, step count, run directory, the resume decision.

Bad input is found here, before the run directory is touched.
"""

from __future__ import annotations

import math
import shutil
import time

import yaml

from rubin.errors import UsageError
from rubin.runs import RunDir
from rubin.train.config import changed_keys


def build_data(cfg, cache_dir: str | None):
    from rubin import workloads

    if cfg.data.import_:
        fn = workloads.import_object(cfg.data.import_, "data.import")
        args = dict(cfg.data.args)
        if cfg.data.path is not None:  # given to the factory that takes it; never dropped without a word
            args = _with_path(fn, cfg, args)
        result = workloads.call_user(fn, args, "data.args")
        if not (isinstance(result, tuple) and len(result) == 2):
            raise UsageError(
                f"data.import={cfg.data.import_!r} returned {type(result).__name__}: it must return "
                "(train_dataset, eval_dataset_or_None)"
            )
        train_ds, eval_ds = result
        info = workloads.info_from_dataset(
            train_ds, task=cfg.data.task, num_classes=cfg.data.num_classes, vocab_size=cfg.model.args.get("vocab_size")
        )
        return train_ds, eval_ds, info
    return workloads.build_data(cfg.data.name, cfg.data.path, dict(cfg.data.args), seed=cfg.run.seed, cache_dir=cache_dir)


def _with_path(fn, cfg, args: dict) -> dict:
    import inspect

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    if "path" in params and "path" not in args:
        return {**args, "path": cfg.data.path}
    raise UsageError(f"data.path={cfg.data.path!r} is not used: data.import={cfg.data.import_!r} takes no 'path' "
                     "argument (or it is set in data.args too); pass the location in data.args, or add a 'path' "
                     "parameter to your factory")


def build_model(cfg, info):
    import torch.nn as nn

    from rubin import workloads

    if cfg.model.import_:
        fn = workloads.import_object(cfg.model.import_, "model.import")
        model = workloads.call_user(fn, dict(cfg.model.args), "model.args")
        if not isinstance(model, nn.Module):
            raise UsageError(f"model.import={cfg.model.import_!r} returned {type(model).__name__}: it must return a torch.nn.Module")
        if not any(p.requires_grad for p in model.parameters()):  # else backward fails with "does not require grad"
            raise UsageError(f"model.import={cfg.model.import_!r} returned a model with no trainable parameters "
                             "(none has requires_grad=True): nothing would train; unfreeze at least one layer")
        return model
    return workloads.build_model(cfg.model.name, dict(cfg.model.args), info)


def total_steps(cfg, steps_per_epoch: int) -> int:
    if steps_per_epoch < 1:
        raise UsageError(
            f"data.batch_size={cfg.data.batch_size} is larger than the training set: no full batch fits in an epoch; "
            "use a smaller batch"
        )
    if cfg.run.max_steps:
        return cfg.run.max_steps
    return max(1, math.ceil(cfg.run.epochs * steps_per_epoch))


def seed(cfg, info) -> None:
    """The same initial weights on every rank; with ``run.deterministic``, threads, kernels and oneMKL's
    vector math pinned before the first step (``determinism.pin``; env.json records what it applied)."""
    import torch

    torch.manual_seed(cfg.run.seed)
    if cfg.run.deterministic:
        from rubin.train.determinism import pin

        info.determinism = pin(info.device)


def prepare_run_dir(cfg, rank: int, *, force: bool, resume: bool, warn) -> tuple[RunDir, bool]:
    """Create or reopen the run dir. Returns (run, resuming). Never clobbers an existing run. WARN takes a warning line."""
    run = RunDir(cfg.run_dir, rank=rank)
    lock = run.lock()  # one writer per run dir, held until the run ends; a second job gets a one-line error
    try:
        return _reopen(run, lock, cfg, rank, force=force, resume=resume, warn=warn)
    except BaseException:
        lock.release()
        raise


def _reopen(run: RunDir, lock, cfg, rank: int, *, force: bool, resume: bool, warn) -> tuple[RunDir, bool]:
    new_text = cfg.to_yaml()
    old = run.read_config()  # a garbled config.yaml is a one-line error, not a crash
    old_text = None if old is None else new_text
    if old is not None:
        diff = changed_keys(old, yaml.safe_load(new_text))
        if diff and not force:
            raise UsageError(
                f"run dir {str(run.path)!r} holds a run with a different config ({', '.join(diff[:5])} differ); "
                "use another run.dir, or --force to move the old run aside and start fresh"
            )
        if not resume and not force:
            raise UsageError(
                f"run dir {str(run.path)!r} already holds a run and --no-resume was given; "
                "use another run.dir, or --force to move the old run aside and start fresh"
            )
        if force and (diff or not resume):
            if rank == 0:
                aside = run.path.with_name(f"{run.path.name}.old-{time.strftime('%Y%m%d-%H%M%S')}")
                shutil.move(str(run.path), str(aside))
                lock.release()  # it moved with the old run; the fresh dir gets its own
                lock = run.lock()
            old_text = None
    run.create()
    if lock.taken_over:
        run.event("lock_taken_over", previous=lock.taken_over)
    damaged = run.damaged_lines() if old_text is not None else []
    if damaged:  # tolerated (readers skip them), but said once, so nobody trusts a file that lost lines
        msg = f"{len(damaged)} damaged line(s) in the run dir's logs are skipped, e.g. {damaged[0]}"
        run.event("warning", message=msg, lines=damaged[:20])
        warn(msg)
    run.write_config(new_text)
    return run, old_text is not None


def completed_run(cfg, total_steps: int, *, resume: bool, force: bool) -> dict | None:
    """The summary of a finished run in the run dir that this command would only repeat; None otherwise.

    Rerunning it must change nothing (summary.json included), so the caller stops before the run
    dir is touched. A run with more steps to go, or a different config, is not complete here.
    """
    if not resume or force:
        return None
    from rubin.runs import read_json

    run = RunDir(cfg.run_dir)
    try:
        old = run.read_config()
        summary = read_json(run.path / "summary.json")
    except (OSError, ValueError):  # UsageError is a ValueError: a garbled config is refused by prepare_run_dir
        return None
    if old is None or not isinstance(summary, dict) or summary.get("status") != "completed":
        return None
    if changed_keys(old, yaml.safe_load(cfg.to_yaml())):
        return None  # prepare_run_dir refuses it with the reason
    return summary if int(summary.get("steps") or 0) >= total_steps else None


def open_run_dir(cfg, info, *, force: bool, resume: bool, warn) -> tuple[RunDir, bool]:
    """``prepare_run_dir`` on rank 0, its verdict shared with every rank; returns (run, resuming) on each."""
    from rubin.train import distributed

    result, run = None, None
    if info.is_main:
        try:
            run, resuming = prepare_run_dir(cfg, 0, force=force, resume=resume, warn=warn)  # kept: it may hold open files
            result = ("ok", resuming)
        except UsageError as err:
            result = ("error", str(err))
    result = distributed.broadcast_object(info, result)
    if result[0] == "error":
        raise UsageError(result[1])
    return run or RunDir(cfg.run_dir, rank=info.rank), result[1]


def blame(cfg, err: BaseException, *, first_step: bool):
    """ERR as the user's error (exit 2, their file:line) when it was raised in their factory, dataset or
    forward, or, before the first step of this process ended, in code that ``model.import`` or
    ``data.import`` brought in; None when it is rubin's or the environment's."""
    from rubin.workloads import blame as blame_user
    from rubin.workloads.imports import blame_first_step

    blamed = blame_user(err)
    if blamed is None and first_step:
        imports = (("model.import", cfg.model.import_), ("data.import", cfg.data.import_))
        blamed = blame_first_step(err, [f"{k}={v!r}" for k, v in imports if v])
    return blamed
