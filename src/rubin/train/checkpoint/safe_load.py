"""Loading a checkpoint without running code: `.pt` files under `weights_only`, DCP metadata through a
restricted unpickler (allowlist).

A pickle can import and call anything, and a manifest does not help, because whoever can write a
checkpoint folder can recompute it. So ``.pt`` files load with ``torch.load(weights_only=True)``.
For DCP (FSDP) checkpoints, torch's ``FileSystemReader.read_metadata`` would ``pickle.load``
``dcp/.metadata`` and its load planner would read non-tensor entries with ``weights_only=False``;
here the metadata goes through an unpickler that only resolves DCP's own metadata classes and a few
plain value types, and non-tensor entries load with ``weights_only=True``. Anything else is refused
before it is called, so the checkpoint counts as invalid and resume falls back to an earlier one.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

from rubin.errors import RubinError

METADATA = ".metadata"

# (module, name) pairs the metadata of torch's FileSystemWriter is built from; nothing else resolves.
_ALLOWED = {
    "torch.distributed.checkpoint.metadata": {
        "Metadata", "MetadataIndex", "StorageMeta", "TensorProperties", "TensorStorageMetadata",
        "BytesStorageMetadata", "ChunkStorageMetadata", "_MEM_FORMAT_ENCODING",
    },
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo", "_StoragePrefix"},
    "torch.serialization": {"_get_layout"},  # maps a layout's name ('torch.strided') to the layout object
    "torch": {"Size"},
    "pathlib": {"PosixPath", "PurePosixPath", "WindowsPath", "PureWindowsPath", "Path"},
    "collections": {"OrderedDict"},
    "builtins": {"set", "frozenset", "slice", "complex"},
}


class UnsafeCheckpoint(RubinError):
    """A checkpoint file that would import or call something other than plain data."""


def _refusal_reason(err: BaseException) -> str:
    """The one informative line of torch's long weights_only message (e.g. 'Unsupported global: ...')."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    for ln in lines:
        if "Unsupported" in ln or "global" in ln.lower():
            return ln.rstrip(".")[:200]
    return (lines[0] if lines else type(err).__name__)[:200]


def load_file(path: str | os.PathLike, map_location="cpu"):
    """``torch.load(weights_only=True)``: tensors, containers and plain values only."""
    import zipfile

    import torch

    path = Path(path)
    if not path.is_file():
        raise RubinError(f"checkpoint file {path} is missing: the checkpoint is incomplete; resume from an earlier step")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise RubinError(
            f"checkpoint file {path} carries a pickled object that is not plain tensors/containers "
            f"({_refusal_reason(err)}): refusing to load it; nothing from it was run. "
            "Only load checkpoints you trust, and save plain state dicts"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError) as err:
        raise RubinError(
            f"checkpoint file {path} is unreadable ({str(err).splitlines()[0][:160] if str(err) else type(err).__name__}): "
            "it is truncated or corrupted; run `rubin checkpoint verify` on its folder and resume from an earlier step"
        ) from None


def pickle_problems(folder: Path, files: dict) -> list[str]:
    """Each ``.pt`` file parses under ``weights_only`` (memory-mapped: tensor bytes are not read).

    The hashes only say the files are the ones committed; this says that loading them cannot run
    code, so ``checkpoint verify`` and resume agree on which checkpoints are usable.
    """
    import torch

    problems = []
    for rel in sorted(files):
        if not rel.endswith(".pt") or "/" in rel:
            continue
        if not (folder / rel).is_file():  # reported as missing already; a FIFO would block the open forever
            continue
        try:
            try:
                torch.load(folder / rel, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as err:
                if "mmap" not in str(err):
                    raise
                torch.load(folder / rel, map_location="cpu", weights_only=True)  # not a zip file: read it whole
        except pickle.UnpicklingError as err:
            problems.append(f"{rel}: holds a pickled object that is not plain data ({_refusal_reason(err)}): refusing to load it")
        except Exception as err:  # noqa: BLE001 - unreadable means invalid, never a crash
            problems.append(f"{rel}: unreadable ({type(err).__name__}: {str(err).splitlines()[0][:120] if str(err) else ''})")
    return problems


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        if module == "torch":  # dtypes are pickled as attributes of torch ('torch', 'float32')
            import torch

            value = getattr(torch, name, None)
            if isinstance(value, torch.dtype):
                return value
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def load_metadata_bytes(data: bytes, where: str = METADATA):
    """The DCP ``Metadata`` in DATA, or :class:`UnsafeCheckpoint` / :class:`RubinError`; nothing foreign runs."""
    from torch.distributed.checkpoint.metadata import Metadata

    try:
        md = _RestrictedUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as err:
        if "refused global" in str(err):
            raise UnsafeCheckpoint(
                f"{where} carries a pickled object that is not DCP checkpoint metadata ({err}): refusing to load it; "
                "nothing from it was run. Only load checkpoints you trust"
            ) from None
        raise RubinError(f"{where} is unreadable ({err}): the checkpoint is corrupted") from None
    except Exception as err:  # noqa: BLE001 - any failure to parse means the file is damaged
        raise RubinError(f"{where} is unreadable ({type(err).__name__}: {err}): the checkpoint is corrupted") from None
    if not isinstance(md, Metadata):
        raise UnsafeCheckpoint(f"{where} holds a {type(md).__name__}, not DCP checkpoint metadata: refusing to load it")
    return md


def load_metadata(dcp_dir: str | Path):
    path = Path(dcp_dir) / METADATA
    return load_metadata_bytes(path.read_bytes(), str(path))


def check(dcp_dir: str | Path) -> list[str]:
    """Problems that make DCP_DIR unsafe or unreadable, without loading any tensor: [] when it is fine.

    The metadata goes through the restricted unpickler, and every non-tensor entry of the shard
    files is parsed with ``weights_only=True`` (those are the other pickles a resume would read).
    """
    import torch
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    dcp_dir = Path(dcp_dir)
    if not (dcp_dir / METADATA).is_file():
        return [f"{dcp_dir.name}/{METADATA} is missing: the DCP checkpoint cannot be read"]
    try:
        md = load_metadata(dcp_dir)
    except (RubinError, OSError) as err:
        return [str(err) if isinstance(err, RubinError) else f"{dcp_dir / METADATA}: unreadable ({err.strerror or err})"]
    problems = []
    storage = md.storage_data if isinstance(md.storage_data, dict) else {}
    for index, info in storage.items():
        fqn = getattr(index, "fqn", None)
        if not isinstance(md.state_dict_metadata.get(fqn), BytesStorageMetadata):
            continue
        rel = getattr(info, "relative_path", "")
        target = (dcp_dir / str(rel)).resolve()
        if target.parent != dcp_dir.resolve():
            problems.append(f"dcp entry {fqn!r} points outside its folder ({rel!r})")
            continue
        if not target.is_file():  # missing, or a FIFO or device that would block or never end
            problems.append(f"dcp entry {fqn!r}: {rel} is not a regular file")
            continue
        try:
            with open(target, "rb") as f:
                f.seek(int(info.offset))
                blob = f.read(int(info.length))
            torch.load(io.BytesIO(blob), weights_only=True)
        except pickle.UnpicklingError as err:
            problems.append(f"dcp entry {fqn!r} in {rel} is not plain data ({_refusal_reason(err)}): refusing it")
        except Exception as err:  # noqa: BLE001 - unreadable is invalid, never a crash
            problems.append(f"dcp entry {fqn!r} in {rel} is unreadable ({type(err).__name__})")
    return problems


def reader(dcp_dir: str | Path):
    """A ``FileSystemReader`` whose ``read_metadata`` uses the restricted unpickler."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeFileSystemReader(FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            path = self._get_metadata_path(kwargs.get("rank"))
            with self.fs.create_stream(path, "rb") as f:
                md = load_metadata_bytes(f.read(), str(path))
            if getattr(md, "storage_meta", None) is None:
                md.storage_meta = StorageMeta()
            md.storage_meta.load_id = self.load_id
            return md

    return SafeFileSystemReader(str(dcp_dir))


def planner():
    """A ``DefaultLoadPlanner`` that loads non-tensor entries with ``weights_only=True``."""
    import torch
    from torch.distributed.checkpoint import DefaultLoadPlanner
    from torch.distributed.checkpoint._traverse import set_element  # the helper DefaultLoadPlanner.load_bytes uses

    class SafeLoadPlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item, value):
            try:
                obj = torch.load(value, weights_only=True)
            except pickle.UnpicklingError as err:
                raise UnsafeCheckpoint(
                    f"dcp entry {read_item.dest_index.fqn!r} is not plain data ({_refusal_reason(err)}): "
                    "refusing to load it; nothing from it was run"
                ) from None
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
            else:
                self.state_dict[read_item.dest_index.fqn] = obj

    return SafeLoadPlanner()


def load(state: dict, dcp_dir: str | Path) -> None:
    """``dcp.load`` through the restricted reader and planner."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    if not (Path(dcp_dir) / METADATA).is_file():  # torch would log two tracebacks looking for it; say it once
        raise RubinError(f"DCP checkpoint {dcp_dir} has no {METADATA}: it is incomplete")
    try:
        dcp.load(state, storage_reader=reader(dcp_dir), planner=planner())
    except CheckpointException as err:  # a BaseException wrapping each rank's error: unwrap it into one line
        inner = [f[0] for f in err.failures.values() if isinstance(f, tuple) and f]
        mine = next((e for e in inner if isinstance(e, RubinError)), None)
        if mine is not None:
            raise mine from None
        first = inner[0] if inner else err
        raise RubinError(f"DCP checkpoint {dcp_dir} is unreadable ({type(first).__name__}: {str(first).splitlines()[0][:200]})") from None
