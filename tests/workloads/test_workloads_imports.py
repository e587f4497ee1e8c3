"""import_object: user models and datasets come in through 'pkg.module:function'."""

import sys

import pytest
import torch

from rubin.errors import UsageError
from rubin.workloads import import_object


@pytest.fixture
def user_pkg(tmp_path, monkeypatch):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(
        "import torch\n"
        "def build(**kw):\n    return torch.nn.Linear(4, 2)\n"
        "class Zoo:\n    @staticmethod\n    def make():\n        return 7\n"
        "NOT_CALLABLE = 3\n")
    (pkg / "broken.py").write_text("import definitely_not_installed_xyz\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield pkg
    for name in [m for m in sys.modules if m == "mypkg" or m.startswith("mypkg.")]:
        del sys.modules[name]


def test_resolves_from_the_current_directory(user_pkg):
    build = import_object("mypkg.models:build", "model.import")
    assert isinstance(build(), torch.nn.Linear)
    assert import_object("mypkg.models:Zoo.make")() == 7


def test_resolves_a_file_path(user_pkg):
    assert isinstance(import_object(f"{user_pkg / 'models.py'}:build")(), torch.nn.Linear)


@pytest.mark.parametrize("spec,match", [
    ("mypkg.models.build", r"model\.import='mypkg\.models\.build' is not valid: an import path 'pkg\.module:function'"),
    ("nopkg.models:build", r"module 'nopkg' not found"),
    ("mypkg.nomod:build", r"module 'mypkg\.nomod' not found"),
    ("mypkg.models:biuld", r"has no attribute 'biuld' \(did you mean 'build'\?\)"),
    ("mypkg.models:NOT_CALLABLE", r"'NOT_CALLABLE' is a int, not a function"),
    ("mypkg.broken:build", r"needs module 'definitely_not_installed_xyz'"),
    ("missing.py:build", r"no such file missing\.py"),
])
def test_a_path_that_does_not_resolve_is_one_line(user_pkg, spec, match):
    with pytest.raises(UsageError, match=match) as err:
        import_object(spec, "model.import")
    assert "\n" not in str(err.value)
