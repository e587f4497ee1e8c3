"""The rules the README and docs/verify.md print are the rules rubin ships."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from rubin.verify.rules import defaults_text, load_rules

ROOT = Path(__file__).resolve().parents[2]


def test_readme_rules_table_is_the_shipped_defaults():
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", (ROOT / "README.md").read_text(), flags=re.M)
    printed = {k: yaml.safe_load(v.strip()) for k, v in rows}
    assert printed == load_rules().model_dump()


def test_docs_print_the_defaults_file_verbatim():
    assert defaults_text() in (ROOT / "docs" / "verify.md").read_text()
