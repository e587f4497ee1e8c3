"""Everything before the first step: data, model, run directory, resume decision.

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
        result = fn(**cfg.data.args) if cfg.data.args else fn()
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


def build_model(cfg, info):
    import torch.nn as nn

    from rubin import workloads

    if cfg.model.import_:
        fn = workloads.import_object(cfg.model.import_, "model.import")
        model = fn(**cfg.model.args)
        if not isinstance(model, nn.Module):
            raise UsageError(f"model.import={cfg.model.import_!r} returned {type(model).__name__}: it must return a torch.nn.Module")
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


def prepare_run_dir(cfg, rank: int, *, force: bool, resume: bool) -> tuple[RunDir, bool]:
    """Create or reopen the run dir. Returns (run, resuming). Never clobbers an existing run."""
    run = RunDir(cfg.run_dir, rank=rank)
    new_text = cfg.to_yaml()
    old_text = run.read_config_text()
    if old_text is not None:
        diff = changed_keys(yaml.safe_load(old_text) or {}, yaml.safe_load(new_text))
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
            old_text = None
    run.create()
    run.write_config(new_text)
    return run, old_text is not None
