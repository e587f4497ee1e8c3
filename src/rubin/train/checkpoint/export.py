"""Trained weights out of a run: ``rubin export RUN [--to PATH] [--format torch|safetensors|hf]``.

The weights come from the newest checkpoint that verifies (committed, every file matching its
manifest; a newer bad one is skipped and named). FSDP runs hold DCP shards: they are read on one
process, without a process group, into full tensors. Keys lose the wrappers' path segments
(``module.``, ``_orig_mod.``, ``_checkpoint_wrapped_module.``, ``_fsdp_wrapped_module.``), so the
file loads with ``load_state_dict(strict=True)`` into a fresh instance of the user's model.
The output is written to a temporary name and renamed, and an existing file is never replaced
without ``--force``.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from rubin.errors import RubinError, UsageError, bad_choice

FORMATS = ("torch", "safetensors", "hf")
WRAPPER_SEGMENTS = ("module", "_orig_mod", "_checkpoint_wrapped_module", "_fsdp_wrapped_module")
_STEP = re.compile(r"^step-(\d{8,})$")


def newest_verified(run_dir: Path) -> tuple[int, Path, list[str]]:
    """``(step, folder, skipped)``: the newest checkpoint that verifies, and why each newer one didn't."""
    from rubin.train.checkpoint import verify
    from rubin.train.checkpoint.safe_load import check

    root = run_dir / "checkpoints"
    steps = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _STEP.match(p.name)) and p.is_dir()) if root.is_dir() else []
    skipped = []
    for step, path in reversed(steps):
        problems = verify(path)
        if not problems and (path / "dcp").is_dir():
            problems = check(path / "dcp")
        if not problems:
            return step, path, skipped
        skipped.append(f"{path.name}: {problems[0]}")
    why = f" (skipped: {'; '.join(skipped)})" if skipped else ""
    raise RubinError(f"run {str(run_dir)!r} has no verified checkpoint to export{why}; "
                     "train with checkpoint.save_final=true (the default) or checkpoint.every_steps=N")


def clean_key(key: str) -> str:
    """DDP's ``module.`` only as the leading segment (a user's own submodule may be called ``module``);
    the compile / checkpoint-wrapper / FSDP1 segments wherever they occur."""
    parts = key.split(".")
    while len(parts) > 1 and parts[0] == "module":
        parts = parts[1:]
    return ".".join(p for p in parts if p not in WRAPPER_SEGMENTS[1:])


def load_weights(folder: Path) -> dict:
    """The model's full state dict from one checkpoint folder, on CPU, wrapper segments removed."""
    if (folder / "dcp").is_dir():
        state = _load_dcp_model(folder / "dcp")
    else:
        from rubin.train.checkpoint import load_file

        state = load_file(folder / "model.pt")
    if not isinstance(state, dict):
        raise RubinError(f"{folder}/model.pt holds a {type(state).__name__}, not a state dict")
    out = {}
    for key, value in state.items():
        new = clean_key(key)
        if new in out:
            raise RubinError(f"two keys in the checkpoint become {new!r} once wrapper prefixes are removed; export cannot choose")
        out[new] = value
    return out


def _load_dcp_model(dcp_dir: Path) -> dict:
    """Every ``model.*`` tensor of a DCP checkpoint, loaded whole on this one process."""
    import warnings

    import torch
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from rubin.train.checkpoint import safe_load

    md = safe_load.load_metadata(dcp_dir)
    model = {}
    for fqn, meta in md.state_dict_metadata.items():
        if fqn.startswith("model.") and isinstance(meta, TensorStorageMetadata):
            model[fqn[len("model."):]] = torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
    if not model:
        raise RubinError(f"{dcp_dir} holds no model tensors: it is not a rubin FSDP checkpoint")
    state = {"model": model}
    with warnings.catch_warnings():  # "no process group: loading on one process" is exactly what we want
        warnings.simplefilter("ignore")
        safe_load.load(state, dcp_dir)
    return state["model"]


def default_target(run_dir: Path, step: int, fmt: str) -> Path:
    suffix = {"torch": ".pt", "safetensors": ".safetensors", "hf": ""}[fmt]
    return run_dir / "export" / f"{'hf-' if fmt == 'hf' else 'model-'}step-{step:08d}{suffix}"


def export(run_dir: str | os.PathLike, to: str | os.PathLike | None = None, fmt: str = "torch", *, force: bool = False) -> dict:
    """Write the weights; returns what was written (for printing and ``--json``)."""
    if fmt not in FORMATS:
        raise bad_choice("--format", fmt, FORMATS)
    run = Path(run_dir)
    if not run.is_dir():
        raise UsageError(f"RUN={str(run)!r} is not a directory; give a run dir (the run.dir of a training run, e.g. runs/demo)")
    if fmt == "safetensors":
        _require_safetensors()
    step, folder, skipped = newest_verified(run)
    target = Path(to) if to else default_target(run, step, fmt)
    if target.exists() and not force:
        raise UsageError(f"--to {str(target)!r} already exists; choose another path, or --force to replace it")
    state = load_weights(folder)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        if fmt == "hf":
            extra = _save_hf(run, state, tmp)
        else:
            extra = {}
            _save_file(state, tmp, fmt)
        if target.exists():  # --force: the old one goes only once the new one is complete
            shutil.rmtree(target) if target.is_dir() else target.unlink()
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp) if tmp.is_dir() else tmp.unlink()
    import torch

    tensors = [v for v in state.values() if isinstance(v, torch.Tensor)]
    return {"path": str(target), "format": fmt, "step": step, "checkpoint": str(folder), "skipped": skipped,
            "tensors": len(tensors), "numel": sum(t.numel() for t in tensors), **extra}


def _require_safetensors() -> None:
    try:
        import safetensors.torch  # noqa: F401
    except ImportError:
        raise UsageError("--format safetensors needs the 'safetensors' package, which is not installed; "
                         "pip install safetensors (or rubin[export]), or use --format torch") from None


def _save_file(state: dict, path: Path, fmt: str) -> None:
    import torch

    if fmt == "torch":
        torch.save(state, path)
        return
    from safetensors.torch import save_file

    seen, plain = set(), {}
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise RubinError(f"state entry {key!r} is a {type(value).__name__}: safetensors holds tensors only; use --format torch")
        t = value.detach().contiguous()
        if t.untyped_storage().data_ptr() in seen:  # tied weights: safetensors refuses shared storage
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        plain[key] = t
    save_file(plain, str(path), metadata={"format": "pt"})


def _save_hf(run: Path, state: dict, path: Path) -> dict:
    """Rebuild the run's model from its config, load the weights strictly, and ``save_pretrained``."""
    from rubin.train.config import load_config

    cfg = load_config(run / "config.yaml")
    if not cfg.model.import_:
        raise UsageError(f"--format hf needs a Hugging Face model, but run {str(run)!r} trained rubin's built-in "
                         f"model '{cfg.model.name}'; use --format torch or safetensors")
    from rubin import workloads

    fn = workloads.import_object(cfg.model.import_, "model.import")
    model = workloads.call_user(fn, dict(cfg.model.args), "model.args")
    owner = next(((name, m) for name, m in model.named_modules() if callable(getattr(m, "save_pretrained", None))), None)
    if owner is None:
        raise UsageError(f"--format hf needs a Hugging Face model (a transformers PreTrainedModel), but {cfg.model.import_} "
                         f"returned a {type(model).__name__}; use --format torch or safetensors")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise RubinError(f"the checkpoint does not fit a fresh {type(model).__name__}: missing {missing[:3]}, unexpected "
                         f"{unexpected[:3]}; was the model's code or model.args changed since training?")
    name, hf = owner
    hf.save_pretrained(str(path))
    return {"hf_class": type(hf).__name__, "hf_submodule": name or None}
