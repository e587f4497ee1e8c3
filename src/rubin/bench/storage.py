"""io benchmarks: sequential write and read of the checkpoint directory, and DataLoader throughput.

Disk: each trial writes one file of ``bytes`` in ``chunk_bytes`` blocks and fsyncs it (so the
figure is the disk, not the page cache), then drops the file from the page cache with
``posix_fadvise(DONTNEED)`` and reads it back. Where fadvise is missing the read may come from
cache, and the method says so. DataLoader: batches per second of the configured dataset
(synthetic images by default) through ``torch.utils.data.DataLoader`` with ``num_workers``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from rubin.bench import stats
from rubin.errors import bad_value

NAME = "io"


def defaults(quick: bool, ctx) -> dict:
    if quick:
        return {"dir": None, "bytes": 32 * 2**20, "chunk_bytes": 4 * 2**20, "trials": 5,
                "dataloader": {"dataset": "synthetic", "samples": 512, "batch_size": 64, "image_size": 32,
                               "num_workers": 0, "batches": 8, "trials": 5}}
    return {"dir": None, "bytes": 2 * 2**30, "chunk_bytes": 64 * 2**20, "trials": 5,
            "dataloader": {"dataset": "synthetic", "samples": 8192, "batch_size": 256, "image_size": 224,
                           "num_workers": min(8, os.cpu_count() or 1), "batches": 20, "trials": 5}}


def _drop_cache(fd: int) -> bool:
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    return False


def disk(params: dict, ctx) -> tuple[list[dict], dict]:
    base = Path(params.get("dir") or ctx.workdir)
    if not base.is_dir():
        raise bad_value("io.dir", str(base), "an existing directory", "create it or pass --io-dir DIR")
    nbytes, chunk = int(params["bytes"]), int(params["chunk_bytes"])
    block = os.urandom(min(chunk, nbytes))  # random bytes: no filesystem compresses them away
    tmp = Path(tempfile.mkdtemp(prefix=".rubin-bench-io-", dir=base))
    writes, reads, cache_dropped = [], [], True
    try:
        for i in range(int(params["trials"])):
            ctx.progress(f"io write/read {nbytes >> 20} MiB trial {i + 1}")
            path = tmp / f"trial-{i}.bin"
            t0 = time.perf_counter()
            with open(path, "wb", buffering=0) as f:
                left = nbytes
                while left > 0:
                    left -= f.write(block[: min(len(block), left)])
                os.fsync(f.fileno())
            writes.append(time.perf_counter() - t0)
            with open(path, "rb", buffering=0) as f:
                cache_dropped &= _drop_cache(f.fileno())
                t0 = time.perf_counter()
                while f.read(chunk):
                    pass
            reads.append(time.perf_counter() - t0)
            path.unlink()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for op, secs in (("write", writes), ("read", reads)):
        t = stats.summarize(secs)
        rows.append({"op": f"disk_{op}", "bytes": nbytes, "dir": str(base), "time_us": stats.transform(t, lambda s: s * 1e6),
                     "gbps": stats.transform(t, lambda s: nbytes / s / 1e9)})
    method = {"write": f"{chunk >> 20} MiB blocks of random bytes, then fsync (counted in the time)",
              "read": "after posix_fadvise(DONTNEED)" if cache_dropped else "page cache could not be dropped: may be cached"}
    return rows, method


class _SyntheticImages:
    """uint8 images converted to float per sample, as an image decode pipeline would hand over."""

    def __init__(self, samples: int, size: int):
        import torch

        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (min(samples, 256), 3, size, size), dtype=torch.uint8, generator=g)
        self.samples = samples

    def __len__(self):
        return self.samples

    def __getitem__(self, i):
        img = self.images[i % len(self.images)].float().div_(255.0)
        return img, i % 10


def dataloader(params: dict, ctx) -> tuple[list[dict], dict]:
    import torch

    if params["dataset"] == "synthetic":
        ds = _SyntheticImages(int(params["samples"]), int(params["image_size"]))
    else:  # any dataset `rubin train` knows (data.name), read from its path, as training would
        from rubin.workloads import registry

        if params["dataset"] not in registry.DATASETS:
            raise bad_value("io.dataloader.dataset", params["dataset"],
                            f"synthetic or a rubin train dataset: {', '.join(registry.DATASETS)}")
        ds, _, _ = registry.build_data(params["dataset"], params.get("path"), params.get("args") or {}, seed=0)
    loader = torch.utils.data.DataLoader(ds, batch_size=int(params["batch_size"]), shuffle=True,
                                         num_workers=int(params["num_workers"]), drop_last=True)
    rates = []
    for i in range(int(params["trials"])):
        ctx.progress(f"dataloader trial {i + 1}")
        it = iter(loader)
        next(it)  # worker start-up is not throughput
        t0, n = time.perf_counter(), 0
        for _, (x, _y) in zip(range(int(params["batches"])), it):
            n += x.shape[0]
        rates.append(n / (time.perf_counter() - t0))
    rows = [{"op": "dataloader", "dataset": params["dataset"], "batch_size": int(params["batch_size"]),
             "num_workers": int(params["num_workers"]), "samples_per_s": stats.summarize(rates)}]
    return rows, {"dataloader": "samples/s over `batches` batches after the first (worker start-up excluded)"}


def run(params: dict, ctx) -> dict:
    rows, method = disk(params, ctx)
    dl_rows, dl_method = dataloader(params["dataloader"], ctx)
    rows += dl_rows
    summary = {r["op"]: (r.get("gbps") or r.get("samples_per_s"))["median"] for r in rows}
    return {"rows": rows, "summary": summary, "method": {**method, **dl_method}}
