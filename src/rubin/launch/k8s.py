"""Kubernetes: a Kubeflow ``PyTorchJob`` (kubeflow.org/v1). Master + Workers, one pod per node.

Each pod runs torchrun with the c10d rendezvous on the master's address (``MASTER_ADDR`` and
``MASTER_PORT``, set by the training operator). Preemption: the pod gets TERM and
``terminationGracePeriodSeconds`` (at least the grace period) to save. The operator's
``restartPolicy: ExitCode`` restarts a pod whose exit code is 128-255 and treats 1-127 as
permanent, so the pod script reports a rubin preemption (exit 75 from the ranks) as 143, the code
of a TERM: a preempted pod is restarted and resumes, a crashed one fails the job. Secrets come
from Kubernetes Secrets (``secretKeyRef``).
"""

from __future__ import annotations

from rubin.errors import UsageError
from rubin.launch import node
from rubin.launch.job import Job, Launched, check_run_dir, refuse_elastic, require_image
from rubin.launch.submit import hand_over
from rubin.launch.yamltext import dump, literal

NAME = "k8s"
EXTENSION = "yaml"
CONTAINER = True
SECRETS_FROM_SHELL = False
SUBMIT = "kubectl"
INSTALL = "install kubectl (https://kubernetes.io/docs/tasks/tools/) and point it at the cluster (kubectl config use-context)"
RETRYABLE_PREEMPTED = 143  # 128 + SIGTERM: retryable under the operator's ExitCode policy


def check(job: Job, cfg, env: dict) -> None:
    refuse_elastic(job)
    lc = job.launch
    require_image(job)
    for name, ref in lc.secrets.items():
        if not (ref and ref.k8s):
            raise UsageError(f"launch.secrets.{name} has no k8s reference: Kubernetes passes secrets by secretKeyRef; "
                             f"set launch.secrets.{name}.k8s=SECRET/KEY (kubectl create secret generic SECRET --from-literal=KEY=...)")
    check_run_dir(job, env, container=CONTAINER)


def render(job: Job) -> str:
    lc = job.launch
    torchrun = job.torchrun(endpoint="$MASTER_ADDR:$MASTER_PORT", rdzv_id=job.name)
    container = {
        "name": "pytorch",  # the operator finds the training container by this name
        "image": lc.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["bash", "-c", literal(node.script(job, torchrun, preempted_exit=RETRYABLE_PREEMPTED))],
        "ports": [{"name": "pytorchjob-port", "containerPort": lc.rdzv_port}],
    }
    if lc.workdir:
        container["workingDir"] = lc.workdir
    env = [{"name": k, "value": v} for k, v in lc.env.items()]
    for name, ref in lc.secrets.items():
        secret, key = ref.k8s.split("/", 1)
        env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}})
    if env:
        container["env"] = env
    limits = {}
    if lc.accelerator == "gpu":
        limits["nvidia.com/gpu"] = job.nproc
    if lc.cpus_per_node:
        limits["cpu"] = lc.cpus_per_node
    if lc.memory_gb:
        limits["memory"] = f"{int(lc.memory_gb * 1024)}Mi"
    if limits:
        container["resources"] = {"limits": limits}
    mounts, volumes = [{"name": "dshm", "mountPath": "/dev/shm"}], [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    for i, m in enumerate(lc.mounts):
        if not m.source.startswith("pvc:"):
            raise UsageError(f"launch.mounts[{i}].source={m.source!r} is not valid for k8s: allowed is pvc:CLAIM_NAME; "
                             "create a PersistentVolumeClaim on shared storage (NFS, Lustre, a ReadWriteMany class) and name it")
        mounts.append({"name": f"mount-{i}", "mountPath": m.path, "readOnly": m.read_only})
        volumes.append({"name": f"mount-{i}", "persistentVolumeClaim": {"claimName": m.source[4:], "readOnly": m.read_only}})
    container["volumeMounts"] = mounts
    pod = {
        "metadata": {"annotations": {"sidecar.istio.io/inject": "false"}},
        "spec": {
            "terminationGracePeriodSeconds": job.grace_s,
            "containers": [container],
            "volumes": volumes,
        },
    }
    if lc.gpu_type:
        pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": lc.gpu_type}
    if lc.spot:
        pod["spec"]["tolerations"] = [{"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot",
                                       "effect": "NoSchedule"},
                                      {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}]
    replicas = {"Master": {"replicas": 1, "restartPolicy": "ExitCode", "template": pod}}
    if lc.nodes > 1:
        replicas["Worker"] = {"replicas": lc.nodes - 1, "restartPolicy": "ExitCode", "template": pod}
    run_policy = {"backoffLimit": lc.max_restarts, "cleanPodPolicy": "None"}
    if job.time_limit_s:
        run_policy["activeDeadlineSeconds"] = job.time_limit_s
    metadata = {"name": job.name, "namespace": lc.namespace}
    if lc.queue:
        metadata["labels"] = {"kueue.x-k8s.io/queue-name": lc.queue}
    doc = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": {"nprocPerNode": str(job.nproc), "runPolicy": run_policy, "pytorchReplicaSpecs": replicas},
    }
    return dump(doc, f"# Written by `rubin launch k8s`: job {job.name!r}. Submit with: kubectl apply -f <this file>")


def submit(job: Job, text: str, out: str | None, env: dict, say=print) -> Launched:
    return hand_over(job, text, out, env, extension=EXTENSION, argv=submit_argv, job_id=parse_job_id, follow=follow)


def submit_argv(path: str, job: Job) -> list[str]:
    return [SUBMIT, "apply", "-f", path, "-o", "name"]


def parse_job_id(stdout: str) -> str | None:
    line = stdout.strip().splitlines()[-1] if stdout.strip() else ""
    return line.split("/", 1)[-1] or None  # "pytorchjob.kubeflow.org/NAME"


def follow(job_id: str, job: Job) -> str:
    ns = job.launch.namespace
    return f"kubectl -n {ns} get pytorchjob {job_id} -w; kubectl -n {ns} logs -f {job_id}-master-0"
