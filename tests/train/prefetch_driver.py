"""``python prefetch_driver.py ARGS``: ``rubin ARGS`` with the CUDA prefetcher's path forced on a CPU.

The next batch is loaded one step ahead, exactly as on CUDA; only the device seam's stream functions
(``platform/device.py``: a side stream, its context, the wait, the allocator's record) are no-ops,
since a CPU copy needs no stream. Used for resume tests that must see the prefetcher's load order.
"""

import contextlib
import sys

from rubin.platform import device as dev
from rubin.train import data
from rubin.train.speed.prefetch import Prefetcher

dev.new_stream = lambda device: "side-stream"
dev.current_stream = lambda device: "compute-stream"
dev.stream_context = lambda stream: contextlib.nullcontext()
dev.wait_stream = lambda stream: None
dev.record_stream = lambda tensor, stream: None
data.batches = lambda loader, device=None: Prefetcher(iter(loader), device, ahead=True)

if __name__ == "__main__":
    from rubin.cli import main

    sys.exit(main(sys.argv[1:]))
