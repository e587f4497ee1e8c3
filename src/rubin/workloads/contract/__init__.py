"""The contract a model meets to be trained by rubin: what ``forward`` may return and the loss over it
(``outputs``), which submodules are its blocks for FSDP and activation checkpointing (``blocks``), and
its FLOPs per sample when it has no formula (``flops``). ``plan/`` and ``train/`` both build on it.
"""
