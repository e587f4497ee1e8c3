"""The reproduction of the first-step divergence, in plain torch: one process, one step, one digest.

An MLP (64 -> 4 x 768 -> 10), one forward/backward and one ``torch.optim.AdamW`` step on the
single-tensor path (what AdamW's defaults pick on CPU, and whose ``exp_avg_sq.sqrt()`` is the
process's first vector-math call), as a fresh process. It prints a digest of the parameters.
``--pin`` applies what ``run.deterministic`` applies, before the step. Used by tests/train/test_determinism.py and
benchmarks/determinism_cost.py.
"""

import hashlib
import sys

import torch

if "--pin" in sys.argv:
    from rubin.train.determinism import pin

    pin(torch.device("cpu"))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 768), torch.nn.ReLU(), torch.nn.Linear(768, 768), torch.nn.ReLU(),
                            torch.nn.Linear(768, 768), torch.nn.ReLU(), torch.nn.Linear(768, 768), torch.nn.ReLU(),
                            torch.nn.Linear(768, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
torch.nn.functional.cross_entropy(model(x), y).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
opt.step()
digest = hashlib.sha256()
for p in model.parameters():
    digest.update(p.detach().numpy().tobytes())
print(digest.hexdigest()[:16])
