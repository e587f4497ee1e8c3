"""``rubin launch``: one training config onto local torchrun, Slurm, Kubernetes, Azure ML or SkyPilot.

``spec`` is the typed ``launch:`` section; ``job`` resolves a config into a ``Job`` (with every
check that must pass before anything is written); one module per target (``local``, ``slurm``,
``k8s``, ``azureml``, ``skypilot``) renders the native file, container targets sharing ``node``'s
per-node script; ``submit`` hands the file to the target's own CLI. Inside a job, ``status`` tells
the script how the attempt ended and ``keyvault`` fetches an Azure secret.
"""
