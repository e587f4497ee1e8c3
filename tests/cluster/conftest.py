from __future__ import annotations

import pytest
from clusterkit import leftovers, make


@pytest.fixture
def cluster_of():
    """``cluster_of(n)``: an emulated cluster of N hosts, taken down after the test however it ends."""
    made = []

    def up(n: int):
        c = make(n)
        made.append(c)
        return c

    yield up
    for c in made:
        c.down()
        assert not leftovers(c), f"cluster {c.name} left behind: {leftovers(c)}"


@pytest.fixture(scope="module")
def module_cluster_of():
    """Like ``cluster_of``, for clusters a whole test module shares."""
    made = []

    def up(n: int):
        c = make(n)
        made.append(c)
        return c

    yield up
    for c in made:
        c.down()
