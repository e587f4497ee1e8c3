"""Resolve ``"pkg.module:function"`` import paths from the config into Python objects."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from rubin.errors import UsageError, bad_value, did_you_mean


def import_object(spec: str, field: str = "import"):
    """Return the callable named by ``"pkg.module:attr"`` (or ``"path/to/file.py:attr"``).

    The current directory is importable, as with ``python -m``, because the ``rubin`` console
    script does not put it on ``sys.path`` and users run it from their project. Every failure
    is one line naming ``field`` and the fix.
    """
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise bad_value(field, spec, "an import path 'pkg.module:function'", "e.g. --set model.import=mypkg.models:build")
    module_name, attr_path = spec.split(":")
    module = _import_module(module_name, spec, field)
    obj = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise bad_value(field, spec, f"'{module_name}' has no attribute '{part}'{did_you_mean(part, names)}",
                            "check the name after the ':'")
        obj = getattr(obj, part)
    if not callable(obj):
        raise bad_value(field, spec, f"'{attr_path}' is a {type(obj).__name__}, not a function or class",
                        "point it at a function that returns the object")
    return obj


def _import_module(module_name: str, spec: str, field: str):
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise bad_value(field, spec, f"no such file {module_name}", "give an existing .py file or a module name")
        mod_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules.setdefault(path.stem, module)
        mod_spec.loader.exec_module(module)
        return module
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        missing = err.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise bad_value(field, spec, f"module '{missing}' not found (searched the current directory and sys.path)",
                            "install the package, run from its directory, or add it to PYTHONPATH") from None
        raise UsageError(f"{field}={spec!r}: importing '{module_name}' failed: it needs module '{missing}', which is "
                         "not installed; install it") from None
