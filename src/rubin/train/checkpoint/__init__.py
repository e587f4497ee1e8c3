"""Checkpoints: when and what (``checkpointer``: the loop's one handle), and how they reach the disk
(commit protocol, manifests, verification, retention, safe loading, async saves) so that a crash, a full
disk or a flipped byte never makes resume use a bad one. ``export`` turns a committed one into files
for other tools.
"""

from rubin.train.checkpoint.background import AsyncCheckpointer, snapshot_to_cpu
from rubin.train.checkpoint.manifest import COMMITTED, MANIFEST, is_disk_full, save_file, sha256_file, verify
from rubin.train.checkpoint.safe_load import load_file
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
