"""nccl-tests bandwidth conventions, against values worked out by hand."""

import pytest

from rubin.bench import busbw
from rubin.errors import UsageError

# Hand-computed: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast 1.
HAND = {
    2: {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "all_to_all": 0.5, "broadcast": 1.0},
    4: {"all_reduce": 1.5, "all_gather": 0.75, "reduce_scatter": 0.75, "all_to_all": 0.75, "broadcast": 1.0},
    8: {"all_reduce": 1.75, "all_gather": 0.875, "reduce_scatter": 0.875, "all_to_all": 0.875, "broadcast": 1.0},
}


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("op", busbw.OPS)
def test_busbw_factor_matches_hand_values(op, n):
    assert busbw.busbw_factor(op, n) == pytest.approx(HAND[n][op])


def test_algbw_is_bytes_over_time_in_1e9_units():
    # 4 GiB in 0.5 s: 4*2**30 / 0.5 / 1e9 = 8.589934592 GB/s.
    assert busbw.algbw_gbps(4 * 2**30, 0.5) == pytest.approx(8.589934592)


def test_busbw_of_8_rank_all_reduce():
    # 1 GB in 10 ms = 100 GB/s algbw; x 1.75 = 175 GB/s busbw.
    assert busbw.busbw_gbps("all_reduce", 10**9, 0.01, 8) == pytest.approx(175.0)


def test_chunked_ops_round_to_a_multiple_of_ranks():
    # 1000 bytes of fp32 = 250 elements; over 3 ranks all_gather needs a multiple of 3: 249.
    assert busbw.element_count("all_gather", 1000, 3, 4) == 249
    assert busbw.element_count("all_reduce", 1000, 3, 4) == 250


def test_unknown_op_is_a_usage_error():
    with pytest.raises(UsageError, match=r"op='all_reduse'"):
        busbw.busbw_factor("all_reduse", 2)
