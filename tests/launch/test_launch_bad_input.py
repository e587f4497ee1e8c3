"""Every bad input is one line, exit 2, and nothing written (no --out file, no run dir)."""

from __future__ import annotations

import os

import pytest
from launchhelp import PLANTED, write_config
from utils import invoke


@pytest.fixture
def cfg(tmp_path):
    return write_config(tmp_path / "train.yaml", tmp_path / "run")


def assert_refused(tmp_path, args, *expect):
    """Assert that the launch is refused: exit 2, one error line holding each EXPECT, nothing written."""
    out = tmp_path / "job.out"
    r = invoke(["launch", *map(str, args), "--out", out])
    assert r.exit_code == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rubin: error: "), r.stderr
    for e in expect:
        assert e in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    assert not out.exists(), "a refused launch wrote its file"
    assert not (tmp_path / "run").exists(), "a refused launch created the run dir"
    return lines[0]


def test_unknown_target(tmp_path, cfg):
    assert_refused(tmp_path, ["slrum", cfg, "--dry-run"], "TARGET='slrum'", "did you mean 'slurm'",
                   "local, slurm, k8s, azureml, skypilot")


def test_zero_nodes(tmp_path, cfg):
    assert_refused(tmp_path, ["slurm", cfg, "--dry-run", "--nodes", "0"], "launch.nodes=0", "at least 1 node")


def test_min_nodes_above_max(tmp_path, cfg):
    assert_refused(tmp_path, ["slurm", cfg, "--dry-run", "--set", "launch.nodes=3:2"], "launch.nodes='3:2'", "MIN 3 is above MAX 2")


def test_elastic_nodes_on_a_fixed_target(tmp_path, cfg):
    assert_refused(tmp_path, ["k8s", cfg, "--dry-run", "--set", "launch.nodes=1:2", "--set", "launch.image=x:1"],
                   "launch.nodes='1:2' is not valid for k8s", "use the local or slurm target")


def test_unknown_launch_key_suggests(tmp_path, cfg):
    assert_refused(tmp_path, ["k8s", cfg, "--dry-run", "--set", "launch.gpus_per_nod=2"], "launch.gpus_per_nod",
                   "did you mean 'gpus_per_node'")


def test_unknown_key_in_launch_file(tmp_path, cfg):
    lf = tmp_path / "launch.yaml"
    lf.write_text("launch:\n  partitoin: gpu\n")
    assert_refused(tmp_path, ["slurm", cfg, "--dry-run", "--launch", lf], "launch.partitoin", "did you mean 'partition'")


def test_gpus_per_node_above_partition(tmp_path, cfg, monkeypatch):
    """A fake sinfo says the partition has 8 GPUs per node; asking for 16 is refused."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho 'gpu:h100:8(S:0-1)'\n")
    (bin_dir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert_refused(tmp_path, ["slurm", cfg, "--dry-run", "--set", "launch.accelerator=gpu", "--gpus-per-node", "16",
                        "--set", "launch.partition=gpu"], "launch.gpus_per_node=16", "offers 8 per node")
    r = invoke(["launch", "slurm", cfg, "--dry-run", "--set", "launch.accelerator=gpu", "--gpus-per-node", "8"])
    assert r.exit_code == 0 and "#SBATCH --gpus-per-node=8" in r.stdout, r.stderr


@pytest.mark.parametrize("target,extra", [
    ("slurm", []),
    ("local", ["--set", "launch.rdzv_host=head-node"]),
    ("k8s", ["--set", "launch.image=img:1", "--set", "run.dir=/shared/run"]),  # /shared is not a mount: container disk
])
def test_node_local_run_dir_with_several_nodes(tmp_path, target, extra):
    cfg = write_config(tmp_path / "train.yaml", "/tmp/rubin-node-local-run")
    assert_refused(tmp_path, [target, cfg, "--dry-run", "--nodes", "2", *extra], "node-local", "launch.nodes=2")


def test_node_local_run_dir_is_fine_on_one_node_and_on_shared_mounts(tmp_path):
    cfg = write_config(tmp_path / "train.yaml", "/tmp/rubin-node-local-run")
    assert invoke(["launch", "slurm", cfg, "--dry-run"]).exit_code == 0
    r = invoke(["launch", "k8s", cfg, "--dry-run", "--nodes", "2", "--set", "launch.image=img:1", "--set", "run.dir=/shared/run",
                "--set", "launch.mounts=[{source: 'pvc:runs', path: /shared, read_only: false}]"])
    assert r.exit_code == 0, r.stderr


def test_missing_scheduler_cli(tmp_path, cfg, monkeypatch):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    line = assert_refused(tmp_path, ["k8s", cfg, "--set", "launch.image=img:1"], "kubectl is not installed", "install kubectl", "--dry-run")
    assert "kubectl" in line
    assert_refused(tmp_path, ["slurm", cfg], "sbatch is not installed")
    assert_refused(tmp_path, ["azureml", cfg, "--set", "launch.image=img:1", "--set", "launch.compute=c"], "az is not installed")
    assert_refused(tmp_path, ["skypilot", cfg], "sky is not installed")


@pytest.mark.parametrize("args,expect", [
    (["--set", "launch.env={HF_TOKEN: abc}"], "launch.env.HF_TOKEN looks like a secret"),
    (["--set", f"launch.env={{MY_SETTING: {PLANTED}}}"], "launch.env.MY_SETTING looks like a secret"),
    (["--set", "launch.mounts=[{source: 'https://acct.blob.core.windows.net/c?sv=2022&sig=AbC%2Bdef', path: /data}]"], "SAS"),
    (["--set", f"launch.setup=['export HF_TOKEN={PLANTED}']"], "launch.setup[0]"),
    (["--set", f"data.args.token={PLANTED}"], "--set data.args.token=<redacted>"),
    (["--set", f"launch.secrets={{HF_TOKEN: {{k8s: {PLANTED}}}}}"], "not a Kubernetes secret reference"),
])
def test_inline_secret_refused_and_never_echoed(tmp_path, cfg, args, expect):
    line = assert_refused(tmp_path, ["k8s", cfg, "--dry-run", "--set", "launch.image=img:1", *args], expect)
    assert PLANTED not in line and "sig=AbC" not in line


def test_secret_without_target_reference(tmp_path, cfg):
    assert_refused(tmp_path, ["k8s", cfg, "--dry-run", "--set", "launch.image=img:1", "--set", "launch.secrets={HF_TOKEN: null}"],
             "launch.secrets.HF_TOKEN has no k8s reference", "SECRET/KEY")
    assert_refused(tmp_path, ["azureml", cfg, "--dry-run", "--set", "launch.image=img:1", "--set", "launch.compute=c",
                        "--set", "launch.secrets={HF_TOKEN: {k8s: hf/token}}"], "no key_vault reference")


def test_secret_missing_from_submitting_shell(tmp_path, cfg, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 1\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("RUBIN_TEST_TOKEN", raising=False)
    assert_refused(tmp_path, ["slurm", cfg, "--set", "launch.secrets={RUBIN_TEST_TOKEN: null}"], "RUBIN_TEST_TOKEN is not set")


def test_grace_shorter_than_the_save_allowance(tmp_path, cfg):
    assert_refused(tmp_path, ["slurm", cfg, "--dry-run", "--set", "launch.grace_s=10", "--set", "checkpoint.preemption_grace_s=25"],
             "launch.grace_s=10", "checkpoint.preemption_grace_s=25")


def test_time_limit(tmp_path, cfg):
    assert_refused(tmp_path, ["slurm", cfg, "--dry-run", "--set", "launch.time_limit=soon"], "launch.time_limit='soon'", "HH:MM:SS")
    assert_refused(tmp_path, ["slurm", cfg, "--dry-run", "--set", "launch.time_limit=30s"], "not longer than the grace period")


def test_existing_out_file_is_not_clobbered(tmp_path, cfg):
    out = tmp_path / "job.sbatch"
    out.write_text("mine\n")
    r = invoke(["launch", "slurm", cfg, "--dry-run", "--out", out])
    assert r.exit_code == 2 and "already exists" in r.stderr
    assert out.read_text() == "mine\n"
    r = invoke(["launch", "slurm", cfg, "--dry-run", "--out", out, "--force"])
    assert r.exit_code == 0 and out.read_text() == r.stdout


def test_train_accepts_and_validates_the_launch_section(tmp_path, cfg):
    r = invoke(["train", cfg, "--print-config"])
    assert r.exit_code == 0 and "launch:" in r.stdout
    r = invoke(["train", cfg, "--print-config", "--set", "launch.nodez=2"])
    assert r.exit_code == 2 and "did you mean 'nodes'" in r.stderr


def test_local_gpu_launch_needs_the_gpus_here(tmp_path, cfg):
    """NVML (a recorded fake: one GPU) decides: 2 nodes x 1 GPU cannot start here; 1 x 1 passes the check."""
    from rubin.launch.local import check_local_gpus
    from rubin.launch.resolve import resolve
    from rubin.platform import nvml_fake

    with nvml_fake.install({"devices": [{"nvmlDeviceGetName": "NVIDIA H100 80GB HBM3"}]}):
        assert_refused(tmp_path, ["local", cfg, "--set", "launch.accelerator=gpu", "--nodes", "2"], "need 2, and it has 1",
                 "launch.accelerator=cpu")
        check_local_gpus(resolve("local", str(cfg), ["launch.accelerator=gpu"]))  # one GPU asked, one there: no error


def test_a_cpu_partition_suggests_accelerator_cpu_or_a_gpu_partition(tmp_path, cfg, monkeypatch):
    """sinfo answers, but the partition has no GPU gres: the fix names a real setting, not gpus_per_node <= 0."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho '(null)'\n")
    (bin_dir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    line = assert_refused(tmp_path, ["slurm", cfg, "--dry-run", "--set", "launch.accelerator=gpu"],
                          "offers no GPUs", "launch.accelerator=cpu", "launch.partition=")
    assert "<= 0" not in line


@pytest.mark.parametrize("bad,needle", [("model.args.hiddn=3", "did you mean 'hidden'"),
                                        ("data.args.num_sample=3", "did you mean 'num_samples'")])
def test_local_checks_model_and_data_arguments_before_starting_ranks(tmp_path, cfg, bad, needle):
    """Under torchrun each rank would print the line and torchrun its own traceback; refused here, once."""
    assert_refused(tmp_path, ["local", cfg, "--dry-run", "--set", bad], bad.split("=")[0], needle)
