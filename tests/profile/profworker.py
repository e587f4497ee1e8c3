"""A 2-rank gloo DDP job recorded with torch.profiler into the layout a profiled run writes.

    torchrun --nproc-per-node=2 profworker.py OUT MODE

MODE: balanced, slow-data (rank 1's loader sleeps), slow-compute (rank 1's forward sleeps),
slow-loader (every rank's loader sleeps), tiny-ops (hundreds of 4x4 layers). The sleeps stand in
for a slow disk and a slow GPU: the trace sees them exactly where a real delay would sit.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

from rubin.platform import process_group

OUT, MODE = sys.argv[1], sys.argv[2]
DELAY_S = 0.04


class Data(torch.utils.data.Dataset):
    def __init__(self, n, width, slow):
        self.x, self.y, self.slow = torch.randn(n, width), torch.randn(n, 1), slow

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if self.slow:
            time.sleep(self.slow)
        return self.x[i], self.y[i]


class Net(torch.nn.Module):
    def __init__(self, width, depth, slow):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.head, self.slow = torch.nn.Linear(width, 1), slow

    def forward(self, x):
        if self.slow:
            time.sleep(self.slow)
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tiny = MODE == "tiny-ops"
    width, depth, batch = (4, 300, 2) if tiny else (256, 4, 32)
    data_slow = {"slow-data": DELAY_S / batch if rank == 1 else 0.0, "slow-loader": DELAY_S / batch}.get(MODE, 0.0)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Net(width, depth, DELAY_S if MODE == "slow-compute" and rank == 1 else 0.0))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Data(batch * 12, width, data_slow), batch_size=batch)
    os.makedirs(f"{OUT}/profile", exist_ok=True)
    sched = schedule(skip_first=2, wait=0, warmup=1, active=5, repeat=1)

    def done(prof):
        prof.export_chrome_trace(f"{OUT}/profile/rank-{rank}.trace.json")

    it = iter(loader)
    try:
        with profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=done) as prof:
            for _ in range(9):
                x, y = next(it)
                loss = torch.nn.functional.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                prof.step()
    finally:
        del it
    meta = {"run_id": os.environ.get("PROF_RUN_ID", "test-run"), "rank": rank, "world_size": dist.get_world_size(),
            "host": f"host-{rank}", "steps": [4, 8], "schedule": {"skip": 2, "warmup": 1, "active": 5}}
    with open(f"{OUT}/profile/rank-{rank}.meta.json", "w") as f:
        json.dump(meta, f)
    process_group.leave()  # barrier, gloo's workers idle, destroy: else a rank can abort at exit


if __name__ == "__main__":
    main()
