"""Resolve ``"pkg.module:function"`` import paths from the config into Python objects."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
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
        try:
            mod_spec.loader.exec_module(module)
        except Exception as err:  # noqa: BLE001 - the user's file failed: show its real error, not ours
            raise _import_failed(field, spec, module_name, err) from err
        return module
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        parts = module_name.split(".")
        missing = next((".".join(parts[:i]) for i in range(1, len(parts) + 1) if not _exists(".".join(parts[:i]))), None)
        if missing is not None:  # missing only when the module itself (or its package) can't be found
            raise bad_value(field, spec, f"module '{missing}' not found (searched the current directory and sys.path)",
                            "install the package, run from its directory, or add it to PYTHONPATH") from None
        raise _import_failed(field, spec, module_name, err) from err
    except Exception as err:  # noqa: BLE001 - a SyntaxError, NameError, ImportError... inside the user's module
        raise _import_failed(field, spec, module_name, err) from err


def _exists(module_name: str) -> bool:
    """Whether the module's file can be found, without importing it (its parents may be imported)."""
    try:
        return importlib.util.find_spec(module_name) is not None
    except (ImportError, ValueError):  # a parent package is missing or broken
        return False


def _import_failed(field: str, spec: str, module_name: str, err: BaseException) -> UsageError:
    where = user_frame(err)
    at = f" at {where}" if where else ""
    if isinstance(err, ModuleNotFoundError) and err.name:
        return UsageError(f"{field}={spec!r}: importing '{module_name}' failed{at}: it needs module '{err.name}', which "
                          "is not installed or not on the path; install it (rerun with --debug for the traceback)")
    return UsageError(f"{field}={spec!r}: importing '{module_name}' failed{at}: {_one_line(err)}; "
                      "fix the module (rerun with --debug for the traceback)")


def call_user(fn, kwargs: dict, field: str):
    """Call the user's factory with the config's arguments; an argument it doesn't take is a one-line error."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C extension: let the call say what is wrong
        sig = None
    if sig is not None:
        try:
            sig.bind(**kwargs)
        except TypeError as err:
            params = [n for n, p in sig.parameters.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
            unknown = [k for k in kwargs if k not in params]
            name = getattr(fn, "__qualname__", repr(fn))
            if unknown:
                raise UsageError(f"{field}.{unknown[0]} is not an argument of {name}{did_you_mean(unknown[0], params)}; "
                                 f"allowed: {', '.join(params) or 'none'}") from None
            raise UsageError(f"{field}={kwargs!r} does not fit {name}{sig}: {err}; set the missing arguments in {field}") from None
    try:
        return fn(**kwargs)
    except Exception as err:  # noqa: BLE001 - the factory is the user's (or their library's): blame it, with its frame
        from rubin.errors import RubinError

        if isinstance(err, RubinError):
            raise
        import traceback

        frames = traceback.extract_tb(err.__traceback__)
        where = user_frame(err) or (f"{_short(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name}" if frames else "")
        owner = field.rsplit(".", 1)[0] + ".import"
        raise UsageError(f"{owner}: {getattr(fn, '__qualname__', fn)}() raised {_one_line(err)} at {where}; "
                         "fix the factory or its arguments (rerun with --debug for the traceback)") from err


# -- blaming the user's code, not rubin, for an exception raised inside it ------------------------
def _library_roots() -> tuple[str, ...]:
    import sysconfig

    import rubin

    roots = {str(Path(rubin.__file__).resolve().parent)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(str(Path(path).resolve()))
    roots.add(str(Path(sys.prefix).resolve()))
    roots.add(str(Path(sys.base_prefix).resolve()))
    return tuple(sorted(roots))


def is_user_file(filename: str) -> bool:
    if not filename or filename.startswith("<"):
        return False
    try:
        resolved = str(Path(filename).resolve())
    except OSError:
        return False
    return not any(resolved == root or resolved.startswith(root + os.sep) for root in _library_roots())


def user_frame(err: BaseException) -> str | None:
    """``file:line in func`` of the innermost frame in the user's own code, or None.

    DataLoader workers re-raise in the main process with the worker's traceback as text; that
    text is searched too. A SyntaxError points at its own file and line.
    """
    import re
    import traceback

    if isinstance(err, SyntaxError) and err.filename and is_user_file(err.filename):
        return f"{_short(err.filename)}:{err.lineno}"
    frames = [f for f in traceback.extract_tb(err.__traceback__) if is_user_file(f.filename)]
    if frames:
        return f"{_short(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name}"
    text = [(m.group(1), m.group(2), m.group(3)) for m in re.finditer(r'File "([^"]+)", line (\d+), in (\S+)', str(err))]
    text = [t for t in text if is_user_file(t[0])]
    if text:
        return f"{_short(text[-1][0])}:{text[-1][1]} in {text[-1][2]}"
    return None


def blame(err: BaseException) -> UsageError | None:
    """A user error for an exception raised inside the user's code (factory, dataset, forward), else None."""
    from rubin.errors import RubinError

    if isinstance(err, (RubinError, KeyboardInterrupt, SystemExit, MemoryError)) or "OutOfMemory" in type(err).__name__:
        return None
    if _is_distributed_failure(err):  # a dead peer surfaces inside forward under FSDP: not the user's bug
        return None
    where = user_frame(err)
    if where is None:
        return None
    return UsageError(f"your code raised {_one_line(err)} at {where}; fix it there (rerun with --debug for the traceback)")


def blame_first_step(err: BaseException, sources: list[str]) -> UsageError | None:
    """An error at the first step of a run whose model or data is the user's, raised inside torch.

    A factory returning ``nn.Sequential(nn.Linear(16, ...))`` for 8 features fails inside torch's own
    ``Linear``, so no frame of the user's code is on the stack; it is still their model (or data) that
    does not fit, not a rubin bug: exit 2 with the sources named, like an error in their ``forward``.
    """
    if not sources or blame(err) is not None or not isinstance(err, (RuntimeError, ValueError, IndexError, TypeError)):
        return None
    if _is_distributed_failure(err) or "out of memory" in str(err).lower():
        return None
    return UsageError(f"your code raised {_one_line(err)} at the first step ({', '.join(sources)}): the model and the "
                      "data do not fit together; fix it there (rerun with --debug for the traceback)")


def _is_distributed_failure(err: BaseException) -> bool:
    names = {c.__name__ for c in type(err).__mro__}
    if names & {"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"}:
        return True
    text = str(err)
    return any(mark in text for mark in ("NCCL", "Gloo", "ProcessGroup", "c10d", "Connection closed by peer", "Watchdog"))


def _one_line(err: BaseException) -> str:
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    if "Original Traceback" in str(err) and lines:  # a DataLoader worker: its last line is the real error
        return lines[-1]
    return f"{type(err).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _short(filename: str) -> str:
    try:
        return os.path.relpath(filename) if not os.path.relpath(filename).startswith("..") else filename
    except ValueError:
        return filename
