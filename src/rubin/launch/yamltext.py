"""YAML for generated job files: block scalars for scripts, keys in the order written."""

from __future__ import annotations

import yaml


class _Literal(str):
    pass


def literal(text: str) -> _Literal:
    """A multi-line string written as a ``|`` block, readable in the job file."""
    return _Literal(text)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):  # the Master and Worker pod templates are written out in full, no &id001
        return True


_Dumper.add_representer(_Literal, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", str(v), style="|"))


def dump(data: dict, header: str = "") -> str:
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)
    return (header + "\n" if header else "") + body
