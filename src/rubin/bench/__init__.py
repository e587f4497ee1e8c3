"""Benchmarks: micro (matmul, memory, host<->device, launch), collectives, io, model; statistics,
the results file, compare rules and plots.

Every benchmark has the same shape: ``run(params: dict, ctx) -> BenchResult`` (rows of figures plus
the method used), and every figure is a ``stats.summarize`` of repeated trials after warm-up.
Nothing here imports torch at module top: ``rubin --help`` stays instant.
"""
