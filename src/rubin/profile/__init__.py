"""``rubin profile``: read the profiler traces of every rank of a run and name the bottleneck.

    traces.py     find and read the traces a profiled run wrote (``<run>/profile/``), damage named
    timeline.py   interval arithmetic and the classes of trace events (compute, comm, memcpy, data)
    breakdown.py  one rank: time breakdown per step, comm/compute overlap, top kernels and operators
    ranks.py      across ranks: step-time skew, the rank the others wait for, the spread
    verdict.py    one finding with evidence, cause and fix, in the doctor's style
    analyze.py    the entry point: a run dir in, one JSON-ready dict out
    render.py     that dict as text

This tier reads run dirs like ``report/`` does; it never imports ``train/``.
"""
