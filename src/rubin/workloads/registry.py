"""The names the config chooses (``model.name``, ``data.name``) and the calls the trainer makes."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Callable, Optional

from rubin.errors import UsageError, bad_value, did_you_mean
from rubin.workloads.arguments import builder_args, check_args
from rubin.workloads.data import builders as data_builders
from rubin.workloads.info import DataInfo
from rubin.workloads.models import builders as model_builders

MODELS: dict[str, Callable] = {
    "vit": model_builders.build_vit,
    "resnet": model_builders.build_resnet,
    "gpt": model_builders.build_gpt,
    "llama": model_builders.build_llama,
    "mlp": model_builders.build_mlp,
}

DATASETS: dict[str, Callable] = {
    "digits": data_builders.build_digits,
    "synthetic_images": data_builders.build_synthetic_images,
    "synthetic_tokens": data_builders.build_synthetic_tokens,
    "synthetic": data_builders.build_synthetic,
    "image_folder": data_builders.build_image_folder,
    "cifar10": data_builders.build_cifar10,
    "tokens": data_builders.build_tokens,
}


def _lookup(table: dict, field: str, name: str) -> Callable:
    if name not in table:
        raise UsageError(f"{field}={name!r} is not a known name{did_you_mean(name, table)}; "
                         f"allowed: {', '.join(table)}; or set {field.split('.')[0]}.import to use your own")
    return table[name]


def build_model(name: str, args: Optional[dict], info: DataInfo):
    """The reference model ``name`` built with ``args`` for data described by ``info``."""
    builder = _lookup(MODELS, "model.name", name)
    args = dict(args or {})
    check_args("model.args", f"model '{name}'", args, builder_args(builder, skip=("info",)))
    return builder(info, **args)


def build_data(name: str, path: Optional[str], args: Optional[dict], *, seed: int,
               cache_dir: Optional[str] = None):
    """``(train_dataset, eval_dataset_or_None, DataInfo)`` for dataset ``name``."""
    builder = _lookup(DATASETS, "data.name", name)
    args = dict(args or {})
    check_args("data.args", f"dataset '{name}'", args, builder_args(builder, skip=("path", "seed", "cache_dir")))
    needs = getattr(builder, "needs_path", None)
    if needs and path is None:
        raise bad_value("data.path", None, f"dataset '{name}' reads {needs}", "set --set data.path=PATH")
    if needs and not Path(path).expanduser().exists():
        raise bad_value("data.path", path, f"no such file or directory; dataset '{name}' reads {needs}",
                        "check the path (relative paths start from the current directory)")
    if not needs and path is not None:
        raise bad_value("data.path", path, f"dataset '{name}' takes no path (it is built in)",
                        "remove data.path, or pick a dataset that reads files")
    return builder(str(Path(path).expanduser()) if path else None, seed=seed, cache_dir=cache_dir, **args)


def flops_per_sample(model, info: Optional[DataInfo] = None) -> Optional[float]:
    """Training FLOPs (forward + backward) per sample, or None when the model doesn't say.

    A model says by a ``flops_per_sample`` attribute (a number) or method; the method may take
    the DataInfo. Wrappers (DDP, torch.compile) are looked through.
    """
    value = getattr(_owner(model, "flops_per_sample"), "flops_per_sample", None)
    if callable(value):
        params = [p for p in inspect.signature(value).parameters.values()
                  if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        value = value(info) if params else value()
    if value is None:
        return None
    value = float(value)
    return value if value > 0 else None


def model_blocks(model) -> list:
    """The repeated blocks to wrap one by one; the rules live in ``rubin.workloads.contract.blocks``."""
    from rubin.workloads.contract.blocks import model_blocks as find

    return find(model)


def _chain(model) -> list:
    """The model and what it wraps: DDP/FSDP1 keep the module in .module, torch.compile in ._orig_mod."""
    chain = [model]
    while len(chain) < 8:
        inner = None
        for attr in ("_orig_mod", "module"):
            cand = getattr(chain[-1], attr, None)
            if cand is not None and hasattr(cand, "parameters") and all(cand is not c for c in chain):
                inner = cand
                break
        if inner is None:
            break
        chain.append(inner)
    return chain


def _owner(model, attr: str):
    """The outermost object in the wrapper chain that defines ``attr`` (a user model's own
    method wins over a submodule that happens to be called ``module``)."""
    for m in _chain(model):
        if getattr(m, attr, None) is not None:
            return m
    return model


def check_arguments(model: tuple, data: tuple) -> None:
    """The argument checks ``build_model`` and ``build_data`` make, without building anything.

    ``model`` and ``data`` are ``(name, import path or None, args)``. A launcher runs this before it
    starts any rank: a typo in model.args is then one line here, not one per rank followed by the
    launcher's own traceback. Imported factories are imported and their signatures bound, not called.
    """
    from rubin.workloads.imports import import_object

    for section, (name, imported, args), table, skip in (("model", model, MODELS, ("info",)),
                                                          ("data", data, DATASETS, ("path", "seed", "cache_dir"))):
        args = dict(args or {})
        if imported:
            fn = import_object(imported, f"{section}.import")
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError):
                continue
            params = [n for n, p in sig.parameters.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
            takes_any = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
            unknown = [k for k in args if k not in params]
            if unknown and not takes_any:
                raise UsageError(f"{section}.args.{unknown[0]} is not an argument of {getattr(fn, '__qualname__', imported)}"
                                 f"{did_you_mean(unknown[0], params)}; allowed: {', '.join(params) or 'none'}")
        else:
            builder = _lookup(table, f"{section}.name", name)
            check_args(f"{section}.args", f"{'model' if section == 'model' else 'dataset'} '{name}'", args,
                       builder_args(builder, skip=skip))
