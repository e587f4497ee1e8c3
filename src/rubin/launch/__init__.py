"""``rubin launch``: one training config onto local torchrun, Slurm, Kubernetes, Azure ML or SkyPilot.

``spec`` is the typed ``launch:`` section; ``resolve`` turns a config into a ``Job`` (``job``), with
every check that must pass before anything is written. Each target is one module (``local``,
``slurm``, ``k8s``, ``azureml``, ``skypilot``) with the names of ``target.Target``: it checks the job,
renders the native file (the container targets share ``node``'s per-node script) and submits it,
through ``submit``'s shared steps. ``targets`` is the one table of them. Inside a job, ``status``
tells the script how the attempt ended and ``keyvault`` fetches an Azure secret.
"""
