"""nccl-tests bandwidth conventions (NVIDIA/nccl-tests doc/PERFORMANCE.md).

``bytes`` is the size column of nccl-tests: the whole buffer of the operation. For all_reduce and
broadcast that is the buffer each rank holds; for all_gather the gathered output and for
reduce_scatter the input (count x typesize x nranks); for all_to_all the send buffer of one rank.

algbw = bytes / time. busbw = algbw x factor, where the factor makes busbw comparable with the
hardware bottleneck (NVLink, PCIe, network) independently of the number of ranks:
all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast 1.
"""

from __future__ import annotations

from rubin.errors import bad_choice, bad_value

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def busbw_factor(op: str, nranks: int) -> float:
    if nranks < 1:
        raise bad_value("ranks", nranks, "at least 1")
    n = float(nranks)
    if op == "all_reduce":
        return 2.0 * (n - 1.0) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1.0) / n
    if op == "broadcast":
        return 1.0
    raise bad_choice("op", op, OPS)


def algbw_gbps(nbytes: int, seconds: float) -> float:
    """Bytes per second in GB/s (1e9, as nccl-tests)."""
    return nbytes / seconds / 1e9


def busbw_gbps(op: str, nbytes: int, seconds: float, nranks: int) -> float:
    return algbw_gbps(nbytes, seconds) * busbw_factor(op, nranks)


def element_count(op: str, nbytes: int, nranks: int, itemsize: int) -> int:
    """Elements of the size column, rounded down so chunked ops split evenly over the ranks."""
    count = max(int(nbytes) // itemsize, 1)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        count = max(count // nranks, 1) * nranks
    return count
