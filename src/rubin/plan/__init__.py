"""Plan a run before renting GPUs: will it fit (memory), how long and how much (cost, spot risk),
how fast on a platform not yet measured (projection), and what to choose (advise).

Everything here is plain arithmetic on numbers and imports no torch, except ``--measure`` and the
accuracy check (``measure.py``, ``fit.py``, ``accuracy.py``), which run real steps and import torch
inside their functions.
"""

GIB = 2**30  # memory sizes are reported in GiB (what torch.cuda and nvidia-smi count in)
GB = 10**9  # the ZeRO paper's figures are decimal GB
