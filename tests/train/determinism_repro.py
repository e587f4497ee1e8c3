"""The reproduction of the first-step divergence, in plain torch: fresh processes, one step, one digest each.

An MLP (64 -> 4 x 768 -> 10), one forward/backward and one ``torch.optim.AdamW`` step on the
single-tensor path (what AdamW's defaults pick on CPU, and whose ``exp_avg_sq.sqrt()`` is the
process's first vector-math call). Each child is a fresh process for oneMKL: the parent imports
torch and forks before any tensor math runs, so no child inherits a warmed vector-math path, and
importing torch (seconds on a busy core) is paid once, not per process. Children run two at a time,
as the issue saw them; each prints its digest on its own line.
``--pin`` applies what ``run.deterministic`` applies, in the child, before the step.

    OMP_NUM_THREADS=2 python tests/train/determinism_repro.py [--procs 24] [--pin]

Used by tests/train/test_determinism.py and docs/upstream/mkl-vml-first-call.md.
"""

import argparse
import hashlib
import os

import torch


def one_step(pin: bool) -> str:
    if pin:
        from rubin.train.determinism import pin as pin_now

        pin_now(torch.device("cpu"))
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
    return digest.hexdigest()[:16]


def _child(pin: bool, w: int) -> None:
    code = 1
    try:
        os.write(w, (one_step(pin) + "\n").encode())
        code = 0
    finally:
        os._exit(code)  # no atexit handlers or buffered output inherited from the parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=1, help="fresh processes, run two at a time")
    ap.add_argument("--pin", action="store_true")
    args = ap.parse_args()
    for start in range(0, args.procs, 2):
        pairs = []
        for _ in range(min(2, args.procs - start)):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(r)
                _child(args.pin, w)
            os.close(w)
            pairs.append((pid, r))
        for pid, r in pairs:
            with os.fdopen(r) as f:
                line = f.read().strip()
            _, status = os.waitpid(pid, 0)
            if status != 0 or not line:
                raise SystemExit(f"a child exited with status {status} and printed {line!r}")
            print(line, flush=True)


if __name__ == "__main__":
    main()
