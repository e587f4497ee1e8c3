"""What each target's generated file says: torchrun with c10d and restarts everywhere, preemption
wired per target, secrets by reference only."""

from __future__ import annotations

import math
import shlex

import pytest
import yaml
from launchhelp import PLANTED, every_file, free_port, write_config
from utils import invoke

SECRET_REFS = "launch.secrets={HF_TOKEN: {k8s: hf-token/token, key_vault: team-vault/hf-token}}"
TARGET_ARGS = {
    "local": [],
    "slurm": ["--set", "launch.partition=gpu", "--set", "launch.time_limit=04:00:00"],
    "k8s": ["--set", "launch.image=ghcr.io/x/train:1", "--set", "launch.mounts=[{source: 'pvc:runs', path: /shared, read_only: false}]"],
    "azureml": ["--set", "launch.image=ghcr.io/x/train:1", "--set", "launch.compute=gpu-cluster",
                "--set", "launch.mounts=[{source: 'azureml://datastores/runs/paths/r', path: /shared, read_only: false}]"],
    "skypilot": ["--set", "launch.gpu_type=H100", "--set", "launch.mounts=[{source: 's3://team-runs', path: /shared, read_only: false}]"],
}


def _dry(tmp_path, target, *extra, grace=20.0):
    cfg = write_config(tmp_path / "train.yaml", "/shared/runs/r1", checkpoint={"preemption_grace_s": grace})
    r = invoke(["launch", target, cfg, "--dry-run", "--nodes", "2", "--gpus-per-node", "4", "--set", "launch.spot=true",
                "--set", "launch.accelerator=gpu", "--set", SECRET_REFS, *TARGET_ARGS[target], *extra])
    assert r.exit_code == 0, r.stderr
    return r.stdout


def _torchrun_words(text: str) -> list[str]:
    """torchrun's arguments, whether a node runs torchrun itself or rubin's agent around it (after its --)."""
    line = next(ln for ln in text.splitlines() if "torch.distributed.run" in ln or "rubin.launch.agent" in ln)
    if "rubin.launch.agent" in line:
        words = shlex.split(line.split("rubin.launch.agent", 1)[1].split("&")[0])
        return words[words.index("--") + 1:]
    return shlex.split(line.split("torch.distributed.run", 1)[1].split("&")[0])


@pytest.mark.parametrize("target", list(TARGET_ARGS))
def test_every_target_runs_torchrun_with_c10d_and_restarts(tmp_path, target):
    words = _torchrun_words(_dry(tmp_path, target, "--set", "launch.max_restarts=5"))
    assert "--rdzv-backend=c10d" in words
    assert "--max-restarts=5" in words
    assert "--nproc-per-node=4" in words
    assert any(w.startswith("--rdzv-endpoint=") for w in words)
    i = words.index("-m")
    assert words[i:i + 3] == ["-m", "rubin", "train"]
    assert "run.dir=/shared/runs/r1" in words


def test_slurm_preemption_wiring(tmp_path):
    text = _dry(tmp_path, "slurm", grace=20.0)
    grace = math.ceil(20.0) + 30  # the default: the save allowance plus a margin to reach a step boundary
    assert f"#SBATCH --signal=B:USR1@{grace}" in text
    assert "#SBATCH --requeue" in text and "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=1" in text
    assert "#SBATCH --time=04:00:00" in text and "#SBATCH --partition=gpu" in text
    assert "--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1" in text
    assert "trap " in text and "kill -USR1 $SRUN" in text
    # The requeue decision comes from summary.json (via rubin.launch.status), never from torchrun's exit code.
    assert "rubin.launch.status" in text and 'scontrol requeue "$SLURM_JOB_ID"' in text
    case = text[text.index('case "$STATUS"'):]
    assert case.index("preempted|retry)") < case.index("scontrol requeue")  # a lost peer requeues like a preemption
    # Several nodes: each runs rubin's agent (node checks, rejoin), without torch's shared store (a replacement rejoins).
    srun = next(ln for ln in text.splitlines() if ln.startswith("srun "))
    assert "-m rubin.launch.agent --run-dir /shared/runs/r1" in srun and "--set faults.hang_timeout_s=300" in srun
    assert "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in text


def test_k8s_pytorchjob(tmp_path):
    doc = yaml.safe_load(_dry(tmp_path, "k8s", grace=20.0))
    assert doc["apiVersion"] == "kubeflow.org/v1" and doc["kind"] == "PyTorchJob"
    specs = doc["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] == 1
    assert doc["spec"]["nprocPerNode"] == "4"
    for role in ("Master", "Worker"):
        assert specs[role]["restartPolicy"] == "ExitCode"
        pod = specs[role]["template"]["spec"]
        assert pod["terminationGracePeriodSeconds"] >= 20
        c = pod["containers"][0]
        assert c["name"] == "pytorch" and c["resources"]["limits"]["nvidia.com/gpu"] == 4
        script = c["command"][2]
        # ExitCode treats 1-127 as permanent: a rubin preemption must leave the pod as a retryable code.
        assert "preempted|retry) exit 143" in script and "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in script
        assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}} in c["env"]
    assert doc["spec"]["runPolicy"]["backoffLimit"] == 3


def test_azureml_command_job(tmp_path):
    doc = yaml.safe_load(_dry(tmp_path, "azureml"))
    assert doc["type"] == "command"
    assert doc["distribution"] == {"type": "pytorch", "process_count_per_instance": 1}
    assert doc["resources"]["instance_count"] == 2
    assert doc["queue_settings"] == {"job_tier": "spot"}
    assert doc["compute"] == "azureml:gpu-cluster"
    assert "rubin.launch.keyvault team-vault/hf-token" in doc["command"] and doc["identity"] == {"type": "managed"}
    assert doc["outputs"]["mount_0"]["mode"] == "rw_mount"


def test_skypilot_task(tmp_path):
    doc = yaml.safe_load(_dry(tmp_path, "skypilot"))
    assert doc["num_nodes"] == 2
    res = doc["resources"]
    assert res["accelerators"] == "H100:4" and res["use_spot"] is True
    assert res["job_recovery"]["strategy"] == "EAGER_NEXT_REGION" and 75 in res["job_recovery"]["recover_on_exit_codes"]
    assert doc["secrets"] == {"HF_TOKEN": None}
    assert 'HEAD=$(echo "$SKYPILOT_NODE_IPS" | head -n1)' in doc["run"]
    assert doc["file_mounts"]["/shared"]["source"] == "s3://team-runs"


def test_grace_warning_from_earlier_saves(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "events.jsonl").write_text(
        '{"time": 1, "kind": "checkpoint_saved", "step": 100, "seconds": 3.0}\n'
        "torn line\n"
        '{"time": 2, "kind": "checkpoint_saved", "step": 200, "seconds": 95.5}\n'
    )
    cfg = write_config(tmp_path / "train.yaml", run_dir)
    r = invoke(["launch", "slurm", cfg, "--dry-run", "--set", "launch.grace_s=60"])
    assert r.exit_code == 0
    assert "warning:" in r.stderr and "step 200" in r.stderr and "95.5 s" in r.stderr and "60 s grace" in r.stderr
    r = invoke(["launch", "slurm", cfg, "--dry-run", "--set", "launch.grace_s=120"])
    assert r.exit_code == 0 and "warning" not in r.stderr


def test_planted_secret_never_reaches_a_file(tmp_path, monkeypatch):
    """The secret is in the environment (as a real job would have it); no generated file and nothing
    in a real local run's dir or output contains it."""
    monkeypatch.setenv("HF_TOKEN", PLANTED)
    outs = tmp_path / "specs"
    outs.mkdir()
    for target in TARGET_ARGS:
        r = invoke(["launch", target, write_config(tmp_path / "train.yaml", "/shared/runs/r1"), "--dry-run",
                    "--out", outs / f"job-{target}", "--nodes", "2", "--set", SECRET_REFS, *TARGET_ARGS[target]])
        assert r.exit_code == 0, r.stderr
        assert PLANTED not in r.stdout + r.stderr
    run_dir = tmp_path / "run"
    cfg = write_config(tmp_path / "train-local.yaml", run_dir, steps=3, launch={"secrets": {"HF_TOKEN": None}})
    from utils import run_rubin

    p = run_rubin(["launch", "local", cfg, "--set", f"launch.rdzv_port={free_port()}"], timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    assert PLANTED not in p.stdout + p.stderr
    files = every_file(outs, run_dir)
    assert len(files) >= 5 + 4  # the five specs and the run's config, env, metrics, summary, ...
    for f in files:
        assert PLANTED.encode() not in f.read_bytes(), f


def test_launch_file_overrides_the_config_section(tmp_path):
    cfg = write_config(tmp_path / "train.yaml", "/shared/runs/r1", launch={"partition": "cpu", "nodes": 1})
    lf = tmp_path / "cluster.yaml"
    lf.write_text("partition: gpu\naccount: team-a\n")  # a bare mapping, or wrapped in `launch:`
    r = invoke(["launch", "slurm", cfg, "--dry-run", "--launch", lf, "--nodes", "3"])
    assert r.exit_code == 0, r.stderr
    assert "#SBATCH --partition=gpu" in r.stdout and "#SBATCH --account=team-a" in r.stdout and "#SBATCH --nodes=3" in r.stdout
