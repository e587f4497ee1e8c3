"""AsyncCheckpointer (``checkpoint.async``): snapshot at a step boundary, write and commit behind the loop.

The loop is stalled only for the snapshot (tensors copied to CPU memory, pinned when CUDA is
there) and for ``store.begin`` (one barrier, issued from the loop's own thread). The background
thread writes the files and commits with ``coordinate="files"``: each rank drops a
``.done-rank-N`` file and rank 0's thread waits for all of them, then manifests and commits.
We chose files over a second process group because a collective from a second thread on the
training group can deadlock against the loop's own collectives, a dedicated group would be
one more thing for the trainer to create and time out, and a rank that dies just leaves an
uncommitted tmp folder behind, which resume ignores.

Sharded state (FSDP) goes through ``save_sharded``: ``torch.distributed.checkpoint.async_save``
stages this rank's shards to CPU memory (in the loop's thread: the stall) and runs DCP's save,
whose planning and metadata steps are collectives, in DCP's own thread. Those collectives use a
dedicated gloo group, made once on the first sharded save, so they never interleave with the
loop's collectives on the training group (DCP requires a CPU backend for async saves anyway).
Our thread waits for DCP's future, writes the small per-rank files, then commits by files as
above: the commit protocol (manifest, ``COMMITTED``, atomic rename) is the same.

Only one save is in flight. A later ``submit`` either waits for it (``policy="wait"``) or is
skipped (``policy="skip"``, one rank only: with several ranks a skip decided locally would
leave peers at a barrier, so it waits instead). Either way an event says so.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from rubin.errors import bad_value
from rubin.train.checkpoint.store import CheckpointStore

POLICIES = ("wait", "skip")


def snapshot_to_cpu(obj: Any, buffers: dict | None = None) -> Any:
    """A deep copy of OBJ with every tensor copied to CPU memory (pinned when CUDA is available).

    With BUFFERS (a dict kept by the caller between calls), each tensor lands in the buffer kept
    under its path in OBJ, allocated on first use and reused after: a later snapshot of the same
    state is then one memcpy into memory that is already mapped. Buffers whose path left OBJ are
    dropped.
    """
    import torch

    from rubin.platform import device as dev

    pin = dev.cuda_available()
    seen: set = set()

    def copy(x, key):
        if isinstance(x, torch.Tensor):
            x = x.detach()
            buf = None if buffers is None else buffers.get(key)
            if buf is None or buf.shape != x.shape or buf.dtype != x.dtype:
                buf = torch.empty(x.shape, dtype=x.dtype, pin_memory=pin)
                if buffers is not None:
                    buffers[key] = buf
            seen.add(key)
            buf.copy_(x, non_blocking=pin)
            return buf
        if isinstance(x, dict):
            items = [(k, copy(v, key + (k,))) for k, v in x.items()]
            return dict(items) if type(x) is dict else type(x)(items)  # keeps OrderedDict (state dicts)
        if isinstance(x, (list, tuple)):
            vals = [copy(v, key + (i,)) for i, v in enumerate(x)]
            return vals if isinstance(x, list) else (type(x)(*vals) if hasattr(x, "_fields") else tuple(vals))
        return x

    out = copy(obj, ())
    if buffers is not None:
        for key in set(buffers) - seen:  # tensors that left the state (e.g. a changed optimizer)
            del buffers[key]
    if pin:
        dev.synchronize(torch.device("cuda"))  # the non_blocking copies must land before the loop mutates the source
    return out


class AsyncCheckpointer:
    def __init__(
        self,
        store: CheckpointStore,
        on_event: Callable[[str, dict], None] | None = None,
        *,
        policy: str = "wait",
        reuse_buffers: bool = True,
        group_timeout_s: float = 600.0,
    ):
        if policy not in POLICIES:
            raise bad_value("checkpoint.async_policy", policy, f"one of {', '.join(POLICIES)}")
        self.store = store
        self.on_event = on_event or store.on_event
        self.policy = policy
        if policy == "skip" and store.world_size > 1:
            self.policy = "wait"
            self.on_event("warning", {"message": "checkpoint async policy 'skip' needs one rank; with "
                                      f"{store.world_size} ranks a save waits for the previous one instead"})
        self.reuse_buffers = reuse_buffers
        self._buffers: dict = {}
        self._thread: threading.Thread | None = None
        self._inflight_step: int | None = None
        self._error: BaseException | None = None
        self.last_write_s: float | None = None
        self.group_timeout_s = group_timeout_s
        self._group = None  # the gloo group of DCP's collectives (sharded saves)
        self._stager = None  # DCP's stager, kept: it reuses its CPU buffers from one save to the next

    @property
    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def inflight_step(self) -> int | None:
        """The step of the save being written, if one is."""
        return self._inflight_step if self.busy else None

    def save(self, step: int, state: Any, write: Callable[[Any, Any], None], meta: dict) -> bool:
        """Snapshot STATE (live tensors) into staging buffers, then ``write(snapshot, tmp_dir)`` in the background.

        The staging buffers are kept and reused by the next save (only one is in flight), so
        after the first save the stall is one memcpy into memory that is already mapped: several
        times faster on CPU than cloning into fresh allocations, which pays a page fault per 4 KiB
        (see benchmarks/checkpoint_stall.py).
        The cost is one checkpoint's worth of resident host memory.
        """
        if not self._make_room(step):
            return False
        snap = self.stage(state)
        return self.submit(step, lambda tmp: write(snap, tmp), meta)

    def stage(self, state: Any) -> Any:
        """A CPU copy of STATE; tensors land in this checkpointer's reused buffers (pinned with CUDA)."""
        if not self.reuse_buffers:
            return snapshot_to_cpu(state)
        if self.busy:  # the buffers are still being written out: never overwrite them under the writer
            self._thread.join()
        return snapshot_to_cpu(state, self._buffers)

    def _make_room(self, step: int) -> bool:
        """Apply the one-in-flight policy; False when this save is skipped."""
        self._raise_pending()
        if self.busy:
            if self.policy == "skip":
                reason = f"the save of step {self._inflight_step} is still being written"
                self.on_event("checkpoint_skipped", {"step": step, "reason": reason})
                return False
            t0 = time.perf_counter()
            prev = self._inflight_step
            self._thread.join()
            waited = time.perf_counter() - t0
            self.on_event("warning", {"message": f"checkpoint of step {step} waited {waited:.2f} s for the save of step {prev}",
                                      "step": step, "waited_s": round(waited, 4)})
            self._raise_pending()
        return True

    def submit(self, step: int, write: Callable[[Any], None], meta: dict) -> bool:
        """Start writing STEP with ``write(tmp_dir)`` in the background; False when skipped.

        WRITE must only touch memory that the loop no longer mutates (a snapshot).
        """
        if not self._make_room(step):
            return False
        tmp = self.store.begin(step)  # in the loop's thread: its barrier is safe here
        self._start(step, tmp, write, meta)
        return True

    def save_sharded(self, step: int, shards: dict, extra: Any, write_extra: Callable[[Any, Any], None], meta: dict) -> bool:
        """FSDP: SHARDS (this rank's DTensor state dicts) into ``tmp/dcp`` through DCP's async save,
        then ``write_extra(snapshot of EXTRA, tmp)`` (trainer and RNG files), then commit; False when skipped.

        Every rank calls it at the same step (it is collective). The loop stalls for the barrier of
        ``begin`` and for staging the shards and EXTRA to CPU memory.
        """
        if not self._make_room(step):
            return False
        import torch.distributed.checkpoint as dcp

        extra = snapshot_to_cpu(extra)
        group, stager = self._sharded_tools()
        tmp = self.store.begin(step)
        try:
            writer = dcp.FileSystemWriter(str(tmp / "dcp"), sync_files=True)
            future = dcp.async_save(shards, storage_writer=writer, process_group=group, async_stager=stager)
        except BaseException:
            self.store.abort(tmp)
            raise

        def write(folder):
            future.result()  # DCP's thread: shards and .metadata written (its last step is a collective)
            write_extra(extra, folder)

        self._start(step, tmp, write, meta)
        return True

    def _sharded_tools(self):
        """The dedicated gloo group and the kept stager, made on the first sharded save."""
        if self._group is None:
            import datetime

            import torch.distributed as dist
            from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

            from rubin.platform import device as dev

            self._group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=self.group_timeout_s))
            cuda = dev.cuda_available()
            self._stager = DefaultStager(StagingOptions(use_pinned_memory=cuda, use_shared_memory=False,
                                                        use_async_staging=False, use_non_blocking_copy=cuda))
        return self._group, self._stager

    def _start(self, step: int, tmp, write: Callable[[Any], None], meta: dict) -> None:
        self._inflight_step = step
        self._thread = threading.Thread(target=self._run, args=(step, tmp, write, meta), name=f"rubin-ckpt-{step}", daemon=True)
        self._thread.start()

    def _run(self, step: int, tmp, write, meta: dict) -> None:
        t0 = time.perf_counter()
        try:
            write(tmp)
            self.store.commit(step, tmp, meta, coordinate="files")
            self.last_write_s = time.perf_counter() - t0
        except BaseException as err:  # noqa: BLE001 - handed to the loop on its next call
            self.store.abort(tmp)
            self._error = err

    def _raise_pending(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def wait(self) -> None:
        """Join the save in flight (if any), then re-raise its error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._raise_pending()
