"""Reference models and datasets that ``rubin train`` trains, and the user-import contract.

- ``build_model(name, args, info)`` and ``build_data(name, path, args, seed=, cache_dir=)`` build
  what the config's ``model.name`` and ``data.name`` choose (tables: ``MODELS``, ``DATASETS``).
- ``import_object("pkg.module:function")`` resolves ``model.import`` / ``data.import``.
- ``flops_per_sample(model, info)`` gives training FLOPs for MFU; ``model_blocks(model)`` the
  blocks to shard and checkpoint one by one.
"""

from rubin.workloads.imports import blame, call_user, import_object
from rubin.workloads.info import DataInfo, info_from_dataset
from rubin.workloads.registry import DATASETS, MODELS, build_data, build_model, flops_per_sample, model_blocks

__all__ = ["DATASETS", "MODELS", "DataInfo", "blame", "build_data", "build_model", "call_user", "flops_per_sample", "import_object",
           "info_from_dataset", "model_blocks"]
