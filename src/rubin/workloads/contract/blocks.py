"""Which submodules are the model's blocks: the units FSDP shards one by one and activation
checkpointing recomputes.

Rules, in order (``docs/byom.md`` lists them for users):

1. ``distributed.blocks`` when set: comma-separated module paths (``transformer.h``, ``layer1,layer2``)
   or class names (``GPT2Block``, ``Block``). A path to a ModuleList/Sequential means its children.
2. A ``model_blocks()`` method on the model (or the outermost submodule that has one).
3. The largest ModuleList or Sequential, anywhere in the model, named ``blocks``, ``layers``,
   ``layer``, ``h`` or ``stages`` (nanoGPT and HF GPT-2 ``transformer.h``, Llama ``model.layers``,
   BERT ``encoder.layer``, timm ``blocks``/``stages``), also inside a user's wrapper module.
4. Numbered residual stages ``layer1``, ``layer2``, ... (torchvision ResNet).
5. Else no blocks: FSDP shards the model as one unit and activation checkpointing does nothing,
   which the trainer reports as a warning naming ``distributed.blocks``.
"""

from __future__ import annotations

import re

from torch import nn

from rubin.errors import UsageError, did_you_mean

CONTAINER_NAMES = ("blocks", "layers", "layer", "h", "stages")
_STAGE = re.compile(r"^layer(\d+)$")


def find_blocks(model: nn.Module, spec: str | None = None) -> tuple[list[nn.Module], str]:
    """``(blocks, how)``: the blocks, and a few words on which rule found them (for events and docs)."""
    model = unwrap(model)
    if spec:
        return _from_spec(model, spec), f"distributed.blocks={spec}"
    for name, mod in model.named_modules():  # the outermost that says, also inside a user's wrapper
        method = getattr(mod, "model_blocks", None)
        if callable(method):
            return list(method()), f"{name}.model_blocks()" if name else "model_blocks()"
    best = None
    for name, mod in model.named_modules():
        if name and name.rsplit(".", 1)[-1] in CONTAINER_NAMES and isinstance(mod, (nn.ModuleList, nn.Sequential)) and len(mod):
            size = _numel(mod)
            if best is None or size > best[0]:
                best = (size, name, mod)
    if best is not None:
        return list(best[2]), best[1]
    for prefix, owner in model.named_modules():
        stages = sorted(((int(m.group(1)), n) for n in owner._modules if (m := _STAGE.match(n))), key=lambda t: t[0])
        if len(stages) >= 2 and [i for i, _ in stages] == list(range(stages[0][0], stages[0][0] + len(stages))):
            names = [f"{prefix}.{n}" if prefix else n for _, n in stages]
            return [owner._modules[n] for _, n in stages], ",".join(names)
    return [], "none found"


def model_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks by the automatic rules (2-5)."""
    return find_blocks(model)[0]


def unwrap(model):
    """Look through DDP (``.module``) and torch.compile (``._orig_mod``), but not a user's own attribute."""
    while type(model).__name__ in ("DistributedDataParallel", "DataParallel", "OptimizedModule"):
        model = getattr(model, "_orig_mod", None) or model.module
    return model


def _numel(mod: nn.Module) -> int:
    return sum(p.numel() for p in mod.parameters())


def _from_spec(model: nn.Module, spec: str) -> list[nn.Module]:
    found: list[nn.Module] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        try:
            mod = model.get_submodule(item)
        except AttributeError:
            mod = None
        if mod is not None:
            found.extend(mod if isinstance(mod, (nn.ModuleList, nn.Sequential)) else [mod])
            continue
        by_class = _outermost(m for m in model.modules() if type(m).__name__ == item and m is not model)
        if not by_class:
            raise UsageError(f"distributed.blocks={spec!r} is not valid: {item!r} is neither a module path nor a class in "
                             f"this model{did_you_mean(item, _candidates(model))}; repeated classes here: "
                             f"{', '.join(_candidates(model)[:8]) or 'none'}; module paths look like 'transformer.h'")
        found.extend(by_class)
    if not found:
        raise UsageError(f"distributed.blocks={spec!r} names no module; give a module path or a class name, e.g. 'Block'")
    ids = {id(m) for m in found}
    if len(ids) != len(found) or any(id(sub) in ids for m in found for sub in list(m.modules())[1:]):
        raise UsageError(f"distributed.blocks={spec!r} is not valid: the blocks overlap (one contains another); "
                         "name each block once, at one level")
    return found


def _outermost(mods) -> list[nn.Module]:
    """Drop modules nested inside an earlier match (a class that contains itself)."""
    out: list[nn.Module] = []
    inside: set[int] = set()
    for m in mods:
        if id(m) in inside:
            continue
        out.append(m)
        inside.update(id(s) for s in m.modules())
    return out


def _candidates(model: nn.Module) -> list[str]:
    """Class names that repeat: the usual block types."""
    counts: dict[str, int] = {}
    for m in model.modules():
        if m is not model and list(m.children()):
            counts[type(m).__name__] = counts.get(type(m).__name__, 0) + 1
    return sorted((n for n, c in counts.items() if c > 1 and n not in ("ModuleList", "Sequential", "ModuleDict")),
                  key=lambda n: -counts[n])


def missing_warning(strategy: str, act_ckpt: bool) -> str | None:
    """The warning for blocks asked for but not found: never silent."""
    wants = [w for w, on in (("FSDP per-block sharding", strategy == "fsdp"), ("activation checkpointing", act_ckpt)) if on]
    if not wants:
        return None
    return (f"no blocks found in the model, so {' and '.join(wants)} "
            f"{'has' if len(wants) == 1 else 'have'} no per-block effect; set distributed.blocks to the repeated layer's "
            "class name or module path (e.g. distributed.blocks=Block or distributed.blocks=transformer.h)")


def apply_activation_checkpointing(blocks: list[nn.Module]) -> None:
    """Recompute each block in backward. Patches ``forward`` on the instance, so state-dict keys do not change.

    The patched ``forward`` is a function of rubin's (``_recomputed``), not ``functools.partial(checkpoint, ...)``:
    with regional compile, dynamo starts tracing at the first frame below ``Module._call_impl`` (which it
    skips), and ``torch.utils.checkpoint.checkpoint`` is ``@torch._disable_dynamo``, so with the partial
    there was no frame to trace and every block ran eagerly. From a frame of ours dynamo traces the
    checkpoint as its higher-order op: one graph reused by every block, recomputation included.
    """
    for block in blocks:
        block.forward = _recomputed(block.forward)


def _recomputed(forward):
    from torch.utils.checkpoint import checkpoint

    def recomputed_forward(*args, **kwargs):
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return recomputed_forward
