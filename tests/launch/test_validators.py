"""The generated specs load with each platform's own loader, not just a YAML parser.

Optional: each test skips, with the reason, where the platform's package is not installed
(pip install azure-ai-ml / skypilot / kubeflow-training). Each also feeds its validator a broken
copy of the spec, to show the validator really checks.
"""

from __future__ import annotations

import warnings

import pytest
import yaml
from launchhelp import write_config
from utils import invoke

COMMON = ["--nodes", "2", "--gpus-per-node", "4", "--set", "launch.accelerator=gpu", "--set", "launch.spot=true",
          "--set", "launch.secrets={HF_TOKEN: {k8s: hf-token/token, key_vault: team-vault/hf-token}}",
          "--set", "launch.time_limit=02:00:00", "--set", "launch.env={NCCL_DEBUG: WARN}"]


def _spec(tmp_path, target, *extra) -> str:
    cfg = write_config(tmp_path / "train.yaml", "/shared/runs/r1")
    out = tmp_path / f"job-{target}.yaml"
    r = invoke(["launch", target, cfg, "--dry-run", "--out", out, *COMMON, *extra])
    assert r.exit_code == 0, r.stderr
    return str(out)


def test_azureml_loads_with_the_sdk(tmp_path):
    ml = pytest.importorskip("azure.ai.ml", reason="azure-ai-ml is not installed (pip install azure-ai-ml)")
    from azure.ai.ml.exceptions import ValidationException
    from marshmallow import ValidationError

    path = _spec(tmp_path, "azureml", "--set", "launch.image=ghcr.io/x/train:1", "--set", "launch.compute=gpu-cluster",
                 "--set", "launch.mounts=[{source: 'azureml://datastores/runs/paths/r', path: /shared, read_only: false}]")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        job = ml.load_job(path)
    assert type(job).__name__ == "Command"
    assert job.resources.instance_count == 2 and job.distribution.process_count_per_instance == 1
    assert job.compute == "gpu-cluster" and job.queue_settings.job_tier == "spot"
    broken = yaml.safe_load(open(path))
    broken["distribution"]["process_count_per_instanc"] = broken["distribution"].pop("process_count_per_instance")
    bad = tmp_path / "broken.yaml"
    bad.write_text(yaml.safe_dump(broken))
    with pytest.raises((ValidationException, ValidationError), match="process_count_per_instanc"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ml.load_job(str(bad))


def test_skypilot_loads_with_the_task_loader(tmp_path):
    sky = pytest.importorskip("sky", reason="skypilot is not installed (pip install skypilot)")
    path = _spec(tmp_path, "skypilot", "--set", "launch.gpu_type=H100",
                 "--set", "launch.mounts=[{source: 's3://team-runs', path: /shared, read_only: false}]")
    task = sky.Task.from_yaml(path)
    assert task.num_nodes == 2
    (res,) = task.resources
    assert res.use_spot and res.accelerators == {"H100": 4}
    broken = yaml.safe_load(open(path))
    broken["resources"]["use_spott"] = broken["resources"].pop("use_spot")
    bad = tmp_path / "broken.yaml"
    bad.write_text(yaml.safe_dump(broken))
    with pytest.raises(Exception, match="use_spott"):
        sky.Task.from_yaml(str(bad))


def _known_to_models(data, obj, client, path=""):
    """Keys of DATA that the SDK model OBJ dropped (unknown to the schema)."""
    back = client.sanitize_for_serialization(obj)
    missing = []

    def walk(a, b, p):
        if isinstance(a, dict):
            for k, v in a.items():
                if not isinstance(b, dict) or k not in b:
                    missing.append(f"{p}.{k}")
                else:
                    walk(v, b[k], f"{p}.{k}")
        elif isinstance(a, list):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{p}[{i}]")
        elif str(a) != str(b):  # quantities come back as strings
            missing.append(f"{p} ({a!r} -> {b!r})")

    walk(data, back, path)
    return missing


def test_pytorchjob_matches_the_kubeflow_models(tmp_path):
    pytest.importorskip("kubeflow.training", reason="kubeflow-training is not installed (pip install kubeflow-training)")
    from kubeflow.training.api_client import ApiClient

    path = _spec(tmp_path, "k8s", "--set", "launch.image=ghcr.io/x/train:1",
                 "--set", "launch.mounts=[{source: 'pvc:runs', path: /shared, read_only: false}]")
    data = yaml.safe_load(open(path))
    client = ApiClient()
    job = client._ApiClient__deserialize(data, "KubeflowOrgV1PyTorchJob")
    assert job.spec.pytorch_replica_specs["Worker"].replicas == 1
    assert job.spec.pytorch_replica_specs["Master"].template.spec.containers[0].name == "pytorch"
    assert _known_to_models(data, job, client) == []
    data["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicyy"] = "Never"  # a typo the models do not know
    job = client._ApiClient__deserialize(data, "KubeflowOrgV1PyTorchJob")
    assert _known_to_models(data, job, client) == [".spec.pytorchReplicaSpecs.Master.restartPolicyy"]
