"""The processes ``rubin doctor --deep`` starts. Run as ``python -m rubin.doctor.deep_worker``.

``gpu INDEX``: allocate on one GPU and run a small matmul checked against the CPU.
``allreduce RANK WORLD PORT BACKEND``: one rank of the all-reduce smoke test.
Each prints one ``RUBIN-DEEP {json}`` line; a failure prints the error there and exits non-zero.
"""

from __future__ import annotations

import json
import sys
import time


def _emit(obj: dict, code: int = 0) -> None:
    print("RUBIN-DEEP " + json.dumps(obj), flush=True)
    sys.exit(code)


def gpu(index: int) -> None:
    import torch

    from rubin.platform import device as seam

    t0 = time.perf_counter()
    dev = seam.pick_device(index, "cuda")
    a = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(0))
    b = torch.randn(1024, 1024, generator=torch.Generator().manual_seed(1))
    big = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=dev)  # 256 MiB allocation
    c = (a.to(dev) @ b.to(dev)).cpu()
    seam.synchronize(dev)
    err = float((c - a @ b).abs().max())
    del big
    _emit({"ok": err < 1e-2, "max_abs_err": err, "seconds": time.perf_counter() - t0,
           "name": seam.device_name(dev), "capability": list(seam.capability(dev))},
          0 if err < 1e-2 else 1)


def allreduce(rank: int, world: int, port: int, backend: str, fail: bool, timeout_s: float) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    from rubin.platform import device as seam

    if fail:  # fault injection for the test of "names the failing rank"
        _emit({"ok": False, "rank": rank, "error": "injected failure before init_process_group"}, 1)
    t0 = time.perf_counter()
    kw = {}
    if backend == "nccl":
        kw["device_id"] = seam.pick_device(rank, "cuda")  # sets this rank's current device
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s), **kw)
    dev = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    x = torch.full((1 << 20,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    expect = world * (world + 1) / 2
    got = float(x[0].item())
    from rubin.platform import process_group

    process_group.leave()
    ok = abs(got - expect) < 1e-6
    _emit({"ok": ok, "rank": rank, "backend": backend, "value": got, "expected": expect,
           "seconds": time.perf_counter() - t0}, 0 if ok else 1)


def main(argv: list[str]) -> None:
    try:
        if argv[0] == "gpu":
            gpu(int(argv[1]))
        elif argv[0] == "allreduce":
            allreduce(int(argv[1]), int(argv[2]), int(argv[3]), argv[4], argv[5] == "1", float(argv[6]))
        else:
            _emit({"ok": False, "error": f"unknown mode {argv[0]!r}"}, 2)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - report any failure as data, with its first line
        _emit({"ok": False, "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:600]}, 1)


if __name__ == "__main__":
    main(sys.argv[1:])
