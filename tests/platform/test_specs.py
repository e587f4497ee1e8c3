"""The GPU spec catalog: name matching (the confusable pairs), unknown GPUs, dense figures."""

import warnings

import pytest

from rubin.errors import UsageError
from rubin.platform import specs

# Names as NVML / torch.cuda.get_device_name report them, with the row each must land on.
KNOWN = [
    ("NVIDIA H200", "H200"),
    ("NVIDIA H200 NVL", "H200-NVL"),
    ("NVIDIA GB300", "GB300"),
    ("NVIDIA B300 SXM6 AC", "B300"),
    ("NVIDIA GB200", "GB200"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA A10", "A10"),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM-40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100-PCIE-40GB"),
    ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
    ("NVIDIA H100 80GB HBM3", "H100-SXM"),
    ("NVIDIA H100 PCIe", "H100-PCIE"),
    ("NVIDIA H100 NVL", "H100-NVL"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA GH200 144G HBM3e", "GH200-144G"),
    ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"),
    ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
    ("NVIDIA VR200", "VR200"),
]


@pytest.mark.parametrize("name,key", KNOWN)
def test_known_names_match_their_row_without_warning(name, key):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning here would raise
        spec = specs.match(name)
    assert spec is not None and spec.key == key


@pytest.mark.parametrize(
    "name",
    ["NVIDIA A10G", "NVIDIA L40", "NVIDIA H100", "AMD Instinct MI300X", "NVIDIA GeForce RTX 4090", "Intel Gaudi", ""],
)
def test_unknown_gpu_gets_none_and_exactly_one_warning(name):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert specs.match(name) is None
    assert len(caught) == 1
    assert "no peak figures" in str(caught[0].message)


def test_confusable_pairs_never_share_a_row():
    pairs = [
        ("NVIDIA GB300", "NVIDIA B300 SXM6 AC"),
        ("NVIDIA GB200", "NVIDIA B200"),
        ("NVIDIA L40S", "NVIDIA L4"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A10"),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB"),
        ("NVIDIA H200 NVL", "NVIDIA H200"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 NVL"),
        ("NVIDIA H100 PCIe", "NVIDIA H100 80GB HBM3"),
    ]
    for a, b in pairs:
        assert specs.match(a).key != specs.match(b).key, (a, b)


def test_rubin_is_its_own_architecture_with_the_published_figures():
    vr = specs.get("VR200")
    assert vr.arch == "Rubin" and vr.compute_capability == "10.7"
    assert vr.nvlink_gen == 6 and vr.nvlink_bw_gbs == 3600
    assert vr.memory_gib == 288 and vr.memory_type == "HBM4" and vr.memory_bw_tbs == pytest.approx(22)
    assert vr.preliminary is True
    # NVIDIA's 50 PF NVFP4 is sparse; the dense training figure is 35 PF.
    assert specs.peak_tflops(vr, "fp4") == 35000
    assert specs.match("NVIDIA Rubin CPX").key != "VR200"


def test_dense_figures_not_sparse_ones():
    # NVIDIA headline (sparse) H100 SXM BF16 is 1,979 TFLOPS; the dense peak is half.
    assert specs.peak_tflops(specs.get("H100-SXM"), "bf16") == pytest.approx(1979 / 2, rel=0.01)
    assert specs.peak_tflops(specs.get("H200"), "fp8") == pytest.approx(3958 / 2, rel=0.01)
    assert specs.peak_tflops(specs.get("B200"), "bf16") == pytest.approx(4500 / 2)
    assert specs.peak_tflops(specs.get("A100-SXM-80GB"), "tf32") == pytest.approx(312 / 2)


def test_every_row_has_a_source_patterns_and_sane_figures():
    rows = specs.catalog()
    assert len({r.key for r in rows}) == len(rows)
    for r in rows:
        assert r.source.strip() and r.nvml_patterns, r.key
        for dtype in specs.DTYPES:
            value = getattr(r, dtype)
            assert value is None or value > 0, (r.key, dtype)
        # Tensor-core BF16 is never below vector FP32 where both are published.
        if r.bf16 and r.fp32:
            assert r.bf16 > r.fp32, r.key


def test_each_catalog_name_matches_only_its_own_row():
    # Each row's own patterns must not also claim another row's typical name.
    for name, key in KNOWN:
        hits = [r.key for r in specs.catalog() if r.matches(name)]
        assert hits == [key], (name, hits)


def test_memory_breaks_ties_and_rejects_impossible_rows():
    # A 40 GB card cannot carry the 80 GB row's identity just because of a misleading name.
    assert specs.match("NVIDIA A100-SXM4-40GB", total_memory_bytes=40 * 2**30).key == "A100-SXM-40GB"
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert specs.match("NVIDIA A100-SXM4-40GB", total_memory_bytes=80 * 2**30) is None


def test_a_capability_that_contradicts_the_name_gives_none():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert specs.match("NVIDIA H200", capability=(10, 0)) is None
    assert len(caught) == 1
    assert specs.match("NVIDIA H200", capability=(9, 0)).key == "H200"


def test_get_accepts_keys_aliases_and_device_names():
    assert specs.get("h200").memory_gib == 141
    assert specs.get("Vera Rubin").key == "VR200"
    assert specs.get("NVIDIA GB300").key == "GB300"


def test_get_unknown_suggests_the_closest_key():
    with pytest.raises(UsageError, match=r"did you mean 'H200'"):
        specs.get("H20O")


def test_get_ambiguous_names_the_choices():
    with pytest.raises(UsageError, match=r"ambiguous.*A100-SXM-40GB.*A100-PCIE-80GB"):
        specs.get("A100")


def test_peak_tflops_dtype_names_and_missing_figures():
    h200 = specs.get("H200")
    assert specs.peak_tflops(h200, "bfloat16") == specs.peak_tflops(h200, "bf16") == 989
    assert specs.peak_tflops(h200, "fp4") is None  # Hopper has no FP4 tensor cores
    assert specs.peak_tflops(specs.get("V100-SXM2-32GB"), "bf16") is None
    assert specs.peak_tflops(None, "bf16") is None
    with pytest.raises(UsageError, match=r"dtype='int3'"):
        specs.peak_tflops(h200, "int3")


def test_importing_the_catalog_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, rubin.platform.specs as s; s.catalog(); s.match('NVIDIA H200'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
