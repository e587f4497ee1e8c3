"""Python's garbage collector runs at step boundaries, on every rank at the same step.

Left alone, the cyclic collector runs whenever enough container objects were allocated: in
the middle of a step, at a different moment on each rank. A full collection over a trainer's
heap (torch, the model, the imported libraries: a few hundred thousand objects) takes tens of
milliseconds here; on one rank of many that is a straggler the others wait for at the next
collective. torchtitan handles it the same way (``training.gc_freq``).

With ``run.gc_every_steps=N`` (default 50):
- at the start, one full collection, then ``gc.freeze()``: everything built during setup
  (modules, model, optimizer, datasets) moves to the permanent generation, so later
  collections never walk it again, and forked DataLoader workers share its pages untouched;
- automatic collection is off while the loop runs;
- every N steps a young-generation collection (``gc.collect(1)``), and every 20 N steps a full
  one, so cycles that lived long enough to be promoted are still freed.
At the end (any exit) collection is switched back on and the setup objects are unfrozen.
DataLoader workers switch collection back on for themselves (``worker_init``).
``run.gc_every_steps=null`` leaves the collector as Python runs it.
"""

from __future__ import annotations

import gc

FULL_EVERY = 20  # young collections per full one


class GcPolicy:
    def __init__(self, every_steps: int | None):
        self.every = every_steps
        self.active = self.froze = False
        self.collections = 0  # young and full, for tests and the curious

    def start(self) -> None:
        if not self.every or self.active or not gc.isenabled():
            return  # off, or the caller already manages the collector: leave it as it is
        gc.collect()
        self.froze = gc.get_freeze_count() == 0  # a caller's own frozen objects are theirs to unfreeze
        if self.froze:
            gc.freeze()
        gc.disable()
        self.active = True

    def step(self, step: int) -> None:
        if self.active and step % self.every == 0:
            gc.collect(2 if step % (self.every * FULL_EVERY) == 0 else 1)
            self.collections += 1

    def stop(self) -> None:
        if self.active:
            self.active = False
            if self.froze:
                gc.unfreeze()
            gc.enable()
