"""Bring-your-own-model figures: the FLOP counter against the analytic counts, and what activation
checkpointing saves on a third-party model when its blocks are found versus not found.

    python benchmarks/byom_measure.py flops              # counted vs analytic, per reference workload
    python benchmarks/byom_measure.py memory --trials 3  # nanoGPT's model.py: peak RSS per configuration

``memory`` runs each configuration in a fresh process (peak RSS only grows within a process), in
alternating order for ``--trials`` rounds, and prints the median, min and max of the peak RSS growth
over the model's own size during two training steps. The three configurations: no activation
checkpointing; checkpointing with the blocks rubin finds (``transformer.h``); checkpointing with no
blocks found (what rubin did before for a model it could not see into, and what it now warns about).
On a GPU the same script reports the allocator's peak instead. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r'''
import json, resource, sys, torch
sys.path.insert(0, sys.argv[1])
from examples.byom.nanogpt import GPT, GPTConfig
from rubin.workloads.contract.blocks import find_blocks
from rubin.workloads.contract.blocks import apply_activation_checkpointing
torch.manual_seed(0)
mode, n_layer, n_embd, seq, batch = sys.argv[2], *map(int, sys.argv[3:7])
model = GPT(GPTConfig(n_layer=n_layer, n_head=4, n_embd=n_embd, block_size=seq, vocab_size=512))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
blocks = find_blocks(model)[0] if mode == "found" else []
if mode != "off":
    apply_activation_checkpointing(blocks)
x = torch.randint(0, 512, (batch, seq))
for _ in range(2):  # the optimizer state exists from step 1 on: step 2's peak is the steady one
    logits, loss = model(x, targets=x)
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
logits, loss = model(x, targets=x)
loss.backward()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"mode": mode, "blocks": len(blocks), "peak_mib": peak / 1024, "growth_mib": (peak - before) / 1024}))
'''


def memory(trials: int, n_layer: int, n_embd: int, seq: int, batch: int) -> None:
    modes = ["off", "found", "none"]
    results: dict[str, list[dict]] = {m: [] for m in modes}
    for t in range(trials):
        order = modes if t % 2 == 0 else modes[::-1]
        for mode in order:
            out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), mode, str(n_layer), str(n_embd), str(seq), str(batch)],
                                 capture_output=True, text=True, check=True, env={"OMP_NUM_THREADS": "2", "PATH": "/usr/bin:/bin"})
            results[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"nanoGPT n_layer={n_layer} n_embd={n_embd} seq={seq} batch={batch}, {trials} trials, peak RSS in MiB "
          "(process peak; growth = peak during step 3's forward+backward over the peak before it)")
    for mode in modes:
        peaks = [r["peak_mib"] for r in results[mode]]
        print(f"  {mode:5s} blocks={results[mode][0]['blocks']:2d}  peak median {statistics.median(peaks):7.0f}  "
              f"min {min(peaks):7.0f}  max {max(peaks):7.0f}")
    off, found, none = (statistics.median(r["peak_mib"] for r in results[m]) for m in modes)
    print(f"  activation checkpointing saves {off - found:.0f} MiB with blocks found ({found / off:.2f}x of off), "
          f"{off - none:.0f} MiB with none found ({none / off:.2f}x)")


def flops() -> None:
    import torch

    from rubin.workloads import DataInfo, build_model, flops_per_sample
    from rubin.workloads.contract.flops import count_step

    cases = {
        "mlp": (DataInfo.classification((16,), 4), lambda n: (torch.randn(n, 16), torch.randint(0, 4, (n,)))),
        "vit": (DataInfo.classification((3, 32, 32), 10), lambda n: (torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,)))),
        "resnet": (DataInfo.classification((3, 32, 32), 10), lambda n: (torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,)))),
        "gpt": (DataInfo.lm(128, 512), lambda n: (torch.randint(0, 512, (n, 128)), torch.randint(0, 512, (n, 128)))),
    }
    print("workload  analytic FLOPs/sample  counted FLOPs/sample  error (default builder args, batch 4)")
    for name, (info, make) in cases.items():
        model = build_model(name, {}, info)
        x, y = make(4)
        counted = count_step(model, x, y, task=info.task) / 4
        analytic = flops_per_sample(model, info)
        print(f"{name:8s}  {analytic:21.4e}  {counted:20.4e}  {(counted - analytic) / analytic * 100:+.2f}%")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["flops", "memory"])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--embd", type=int, default=256)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    a = p.parse_args()
    if a.what == "flops":
        flops()
    else:
        memory(a.trials, a.layers, a.embd, a.seq, a.batch)


if __name__ == "__main__":
    main()
