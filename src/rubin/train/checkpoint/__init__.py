"""Checkpoint storage: commit protocol, manifests, verification, retention, safe loading, async saves.

``rubin.train.checkpointing`` (with ``Strategy.save_state``) decides what goes into a checkpoint; this package decides how it reaches
the disk so that a crash, a full disk or a flipped byte never makes resume use a bad one.
"""

from rubin.train.checkpoint.background import AsyncCheckpointer, snapshot_to_cpu
from rubin.train.checkpoint.files import is_disk_full, load_file, save_file, sha256_file
from rubin.train.checkpoint.manifest import COMMITTED, MANIFEST, verify
from rubin.train.checkpoint.store import CheckpointStore

__all__ = [
    "AsyncCheckpointer",
    "CheckpointStore",
    "COMMITTED",
    "MANIFEST",
    "is_disk_full",
    "load_file",
    "save_file",
    "sha256_file",
    "snapshot_to_cpu",
    "verify",
]
