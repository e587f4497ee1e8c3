"""Exit codes and the user-facing error type.

A user error is one line: the offending ``name=value``, what is allowed, and how to fix it.
The CLI boundary (``rubin.cli.main``) turns these into that line and the exit code below;
tracebacks only appear with ``--debug``.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1  # the command ran and failed (training diverged, a benchmark failed, ...)
    USAGE = 2  # bad arguments or config; nothing was touched
    PROBLEMS = 3  # doctor found errors / compare found a failing rule
    PREEMPTED = 75  # stopped and resumable: a signal after a committed checkpoint, or a lost peer (EX_TEMPFAIL: requeue me)
    INTERRUPTED = 130  # Ctrl-C without a checkpoint


class RubinError(Exception):
    """An error meant for the user. ``str(err)`` is the whole message, one line."""

    exit_code: ExitCode = ExitCode.FAILURE

    def __init__(self, message: str, exit_code: ExitCode | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(RubinError, ValueError):
    """Bad input: arguments, config values, files. Exit code 2."""

    exit_code = ExitCode.USAGE


class Preempted(RubinError):
    """A run stopped on a signal after its emergency checkpoint committed. Exit code 75: requeue it."""

    exit_code = ExitCode.PREEMPTED


def bad_value(name: str, value: object, allowed: str, fix: str = "") -> UsageError:
    """Build the one-line error in the project's recipe: value, then allowed, then fix."""
    msg = f"{name}={value!r} is not valid: {allowed}"
    if fix:
        msg += f"; {fix}"
    return UsageError(msg)


def did_you_mean(word: str, choices) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    import difflib

    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def bad_choice(name: str, value: object, choices, fix: str = "") -> UsageError:
    """``name='x' is not valid (did you mean 'y'?): allowed are a, b, c; <fix>``."""
    choices = [str(c) for c in choices]
    msg = f"{name}={value!r} is not valid{did_you_mean(value, choices)}: allowed are {', '.join(choices)}"
    return UsageError(f"{msg}; {fix}" if fix else msg)


def _fields_at(model, loc: tuple) -> list[str]:
    """The keys allowed at ``loc`` inside a pydantic model class (list indexes are stepped over)."""
    import typing

    from pydantic import BaseModel

    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part) or next((f for f in model.model_fields.values() if f.alias == part), None)
        ann = getattr(field, "annotation", None)
        nxt = None
        for cand in (ann, *typing.get_args(ann), *(a for t in typing.get_args(ann) for a in typing.get_args(t))):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                nxt = cand
                break
        model = nxt
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def validation_error(err, model=None, *, where: str = "", fix: str = "fix it and rerun") -> UsageError:
    """One line from a pydantic ``ValidationError``: the first problem, with a did-you-mean for unknown keys.

    ``model`` is the root model class (for the keys allowed next to an unknown one); ``where`` names the
    file or flag the values came from.
    """
    e = err.errors()[0]
    loc = tuple(e["loc"])
    name = ".".join(str(p) for p in loc) or "value"
    prefix = f"{where}: " if where else ""
    if e["type"] == "extra_forbidden":
        allowed = _fields_at(model, loc[:-1]) if model is not None else []
        section = ".".join(str(p) for p in loc[:-1]) or "the top level"
        tail = f"; keys allowed in {section}: {', '.join(allowed)}" if allowed else f"; {fix}"
        return UsageError(f"{prefix}unknown key {name!r}{did_you_mean(loc[-1], allowed)}{tail}")
    if e["type"] == "missing":
        return UsageError(f"{prefix}{name} is missing; {fix}")
    if e["type"] == "value_error":
        return UsageError(prefix + e["msg"].removeprefix("Value error, "))
    return UsageError(f"{prefix}{name}={e.get('input')!r} is not valid: {e['msg'].lower()}; {fix}")


def load_mapping(path, what: str = "file", fix: str = "") -> dict:
    """Read a YAML or JSON file that must hold a mapping; every way it can be wrong is one UsageError.

    Missing, a directory, unreadable, not UTF-8, not parseable, a duplicate key (YAML would silently
    keep the last one) and a non-mapping top level are all refused, naming the path.
    """
    import json
    from pathlib import Path

    p = Path(path)
    hint = f"; {fix}" if fix else ""
    if p.is_dir():
        raise UsageError(f"{what} {str(p)!r} is a directory, not a file{hint}")
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{what} {str(p)!r} does not exist{hint}") from None
    except OSError as exc:
        raise UsageError(f"{what} {str(p)!r} cannot be read: {exc.strerror or exc}{hint}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {str(p)!r} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                         f"save it as UTF-8{hint}") from None
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicate_pairs)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{what} {str(p)!r} is not valid JSON: {exc.msg} at line {exc.lineno}{hint}") from None
        except _DuplicateKey as exc:
            raise UsageError(f"{what} {str(p)!r} has the key {exc.args[0]!r} twice; keep one{hint}") from None
    else:
        data = load_yaml_text(text, f"{what} {str(p)!r}", hint)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"{what} {str(p)!r} must hold a mapping of keys, got {type(data).__name__}{hint}")
    return data


class _DuplicateKey(Exception):
    pass


def _no_duplicate_pairs(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def yaml_loader():
    """``yaml.SafeLoader`` without YAML 1.1's base-60 integers: ``nodes: 2:4`` is the text "2:4", not 124
    (YAML 1.2 dropped them too)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    int_tag = "tag:yaml.org,2002:int"
    Loader.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag != int_tag]
                                      for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Loader.add_implicit_resolver(int_tag, re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
                                 list("-+0123456789"))
    return Loader


def safe_yaml(text: str):
    """``yaml.safe_load`` with ``yaml_loader``'s rules."""
    import yaml

    return yaml.load(text, Loader=yaml_loader())  # noqa: S506 - a SafeLoader subclass


def load_yaml_text(text: str, where: str = "YAML", hint: str = ""):
    """``yaml.safe_load`` that refuses duplicate keys, with errors as one line naming ``where``."""
    import yaml

    class StrictLoader(yaml_loader()):
        pass

    def construct_mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    loader = StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None and _expanded_size(node) > MAX_YAML_NODES:
            raise UsageError(f"{where} expands to more than {MAX_YAML_NODES:,} values through its aliases (&x / *x); "
                             f"write the values out or use fewer nested aliases{hint}")
        return loader.construct_document(node) if node is not None else None
    except _DuplicateKey as exc:
        line = f" (line {exc.args[1]})" if len(exc.args) > 1 else ""
        raise UsageError(f"{where} has the key {exc.args[0]!r} twice{line}; keep one{hint}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{where} is not valid YAML: {str(exc).splitlines()[0]}{hint}") from None
    except RecursionError:
        raise UsageError(f"{where} is nested too deeply to read; flatten it{hint}") from None
    finally:
        loader.dispose()


# A config is a few hundred values. Aliases are shared while parsing, but anything that walks the
# result (validation, copies, JSON) expands them: 9 levels of 9 aliases are 387 million values.
MAX_YAML_NODES = 100_000


def _expanded_size(root) -> int:
    """How many values the node graph holds once every alias is expanded (a shared node counts at each use)."""
    import yaml

    sizes: dict[int, int] = {}

    def size(node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        sizes[key] = 1  # a recursive alias (&a [*a]) counts once instead of looping
        if isinstance(node, yaml.MappingNode):
            children = [c for pair in node.value for c in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_YAML_NODES:
                break
        sizes[key] = total
        return total

    return size(root)
