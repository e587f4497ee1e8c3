"""Helpers shared by the checks: data tables, versions, sizes, and "is this a GPU machine"."""

from __future__ import annotations

import functools
import re
from importlib import resources

import yaml

from rubin.errors import RubinError

GIB = 1024 ** 3


def _strict_loader():
    """yaml's C-accelerated safe loader (10x faster here: the knowledge base is 100+ KB) that refuses
    duplicate keys like ``rubin.errors.load_yaml_text`` does."""
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Strict(base):  # type: ignore[misc, valid-type]
        pass

    def mapping(loader, node, deep=False):
        keys = [loader.construct_object(k, deep=deep) for k, _ in node.value]
        dup = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
        if dup is not None:
            raise ValueError(f"duplicate key {dup!r}")
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    Strict.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return Strict


@functools.lru_cache(maxsize=None)
def data(name: str) -> dict:
    """One of the doctor's data tables (data/<name>), parsed once; the single loader for all of them.

    Duplicate keys are refused: in a table of facts a repeated key silently drops a row."""
    text = resources.files("rubin.doctor").joinpath("data", name).read_text(encoding="utf-8")
    try:
        return yaml.load(text, Loader=_strict_loader())  # noqa: S506 - a SafeLoader
    except (yaml.YAMLError, ValueError) as exc:
        raise RubinError(f"rubin's data file {name} is broken ({str(exc).splitlines()[0]}); reinstall rubin") from None


def vtuple(text: str | None) -> tuple[int, ...]:
    """'570.124.06' -> (570, 124, 6); '' -> ()."""
    return tuple(int(x) for x in re.findall(r"\d+", text or ""))


def gib(n: int | float | None) -> str:
    return "unknown" if n is None else f"{n / GIB:.1f} GiB"


def gpus(facts):
    return facts.gpu_list()


def gpu_label(g) -> str:
    return f"GPU {g.index} ({g.name.get('?')})"


def nvidia_present(facts) -> bool:
    """Is there any sign of an NVIDIA GPU on this machine (even one the driver cannot see)?"""
    d = facts.driver
    return bool(
        d.gpu_pci_devices.get(0)
        or d.dev_nodes.get([])
        or d.module_loaded.get(False)
        or facts.gpu_list()
        or (d.nvidia_smi.known and d.nvidia_smi.value.error is None)
        # NVML failing for another reason than "no library" means a driver is installed; it only counts
        # when the PCI bus could not be read (with the bus readable, no NVIDIA device there is the answer)
        or (d.gpu_pci_devices.unknown and d.nvml_error_name.get("") not in ("", "LIBRARY_NOT_FOUND"))
    )


def cuda_tuple(text: str | None) -> tuple[int, int] | None:
    t = vtuple(text)
    return (t[0], t[1] if len(t) > 1 else 0) if t else None


def min_driver_for_cuda(cuda: str) -> tuple[str | None, str]:
    """The driver that shipped with this CUDA (exact or the next release listed), and the source."""
    table = data("cuda.yaml")["drivers"]
    want = cuda_tuple(cuda)
    best = None
    for k, row in table.items():
        if cuda_tuple(k) >= want and (best is None or cuda_tuple(k) < cuda_tuple(best[0])):
            best = (k, row)
    if best is None:
        return None, "not in rubin's CUDA table"
    exact = cuda_tuple(best[0]) == want
    return best[1]["driver"], best[1]["source"] + ("" if exact else f" (CUDA {best[0]}, the next listed release)")


def arch(cc: str) -> dict | None:
    return data("cuda.yaml")["archs"].get(cc)


def sm(cc: str) -> int:
    major, minor = (int(x) for x in cc.split("."))
    return major * 10 + minor
