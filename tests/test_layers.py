"""The layer rule of docs/architecture.md, checked on the source: imports only go down the tier table
(never up, never sideways to another package of the same tier), no import cycle between files, nothing
below cli/ prints, nothing outside platform/ touches torch.cuda. Every import counts, also the ones
inside functions. The deliberate exceptions are listed here, each with its reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

# (importing module, imported module): allowed although the tiers say no. Keep this short.
IMPORT_EXCEPTIONS: dict[tuple[str, str], str] = {}
# (importing package, imported package): refused although the tiers would allow it.
FORBIDDEN = {
    ("plan", "train"): "the planner's measured step uses the model contract (workloads/contract), not the loop",
}

# Modules below cli/ that may call print(): each is its own process's entry point, and its stdout is
# the protocol its parent reads (or the user's terminal, for a `python -m` tool).
PRINT_EXCEPTIONS = {
    "rubin.train.observe.console": "the Console the CLI creates and passes down: the one writer of progress lines",
    "rubin.doctor.deep_worker": "a subprocess of doctor --deep; its RUBIN-DEEP line on stdout is the result",
    "rubin.platform.probe_software": "a script run in a child interpreter; its RUBIN-TORCH-PROBE line is the result",
    "rubin.platform.nvml_record": "`python -m rubin.platform.nvml_record`: prints the recording",
    "rubin.launch.keyvault": "`python -m rubin.launch.keyvault` inside a job: prints one secret for the shell",
    "rubin.launch.agent": "`python -m rubin.launch.agent` on each node of a job: its lines are the node's log",
    "rubin.launch.status": "`python -m rubin.launch.status` inside a job: prints how the attempt ended",
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The rubin modules NAME imports, anywhere in the file. ``from pkg import mod`` points at the
    module; the implicit import of a package's ``__init__`` on the way is not counted."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for target in targets:
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in MODULES and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _top(module: str) -> str:
    """The layer unit: ``rubin.train.faults.policy`` -> ``train``; the package's own ``__init__`` -> ``rubin``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "rubin"


def _tiers() -> dict[str, int]:
    """The tier table of docs/architecture.md: rows ``| N | `a`, `b` | ... |``, 0 at the top."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    tiers = {}
    for m in re.finditer(r"^\| (\d+) \| ([^|]+) \|", text, re.M):
        for unit in re.findall(r"`([\w.]+)`", m.group(2)):
            tiers[unit.removesuffix("/").removesuffix(".py")] = int(m.group(1))
    return tiers


TIERS = _tiers()


def test_the_tier_table_names_every_package_and_module():
    units = {_top(m) for m in MODULES}
    assert len(set(TIERS.values())) >= 8, TIERS  # the table was found and read
    assert sorted(units - TIERS.keys()) == []  # a new package gets a row in docs/architecture.md
    assert sorted(TIERS.keys() - units) == []  # and the table names nothing that is gone


def test_no_import_runs_up_or_sideways():
    wrong = []
    for importer, imported in ((a, b) for a, bs in GRAPH.items() for b in bs):
        ta, tb = _top(importer), _top(imported)
        if ta == tb or TIERS[ta] < TIERS[tb] or (importer, imported) in IMPORT_EXCEPTIONS:
            continue
        arrow = "up" if TIERS[ta] > TIERS[tb] else "sideways (same tier)"
        wrong.append(f"{importer} -> {imported} ({arrow}: tier {TIERS[ta]} -> {TIERS[tb]})")
    assert sorted(wrong) == []


def test_no_forbidden_import():
    found = [f"{a} -> {b}" for a, bs in GRAPH.items() for b in bs if (_top(a), _top(b)) in FORBIDDEN]
    assert found == []


def test_the_exceptions_are_still_needed():
    assert [pair for pair in IMPORT_EXCEPTIONS if pair[1] not in GRAPH.get(pair[0], ())] == []


def test_no_import_cycle_between_files():
    """Tarjan's strongly connected components over the file graph: every component is one file."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_checker_sees_a_cycle_and_an_upward_arrow():
    """The rules above would pass on an empty graph: check they read real imports."""
    assert "rubin.launch.spec" in GRAPH["rubin.launch.job"]  # module level
    assert "rubin.train.config" in GRAPH["rubin.launch.resolve"]  # inside a function
    assert "rubin.train.checkpoint.manifest" in GRAPH["rubin.train.checkpoint.store"]  # from pkg import mod
    assert TIERS["cli"] < TIERS["train"] < TIERS["workloads"] < TIERS["errors"]


def _calls(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            yield node


def test_nothing_below_cli_prints():
    found = []
    for name, path in MODULES.items():
        if _top(name) == "cli" or name in PRINT_EXCEPTIONS or name == "rubin.__main__":
            continue
        found += [f"{name}:{c.lineno}" for c in _calls(path) if isinstance(c.func, ast.Name) and c.func.id == "print"]
    assert found == []


def test_nothing_outside_platform_touches_torch_cuda():
    found = []
    for name, path in MODULES.items():
        if _top(name) == "platform":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            attribute = isinstance(node, ast.Attribute) and node.attr == "cuda" and getattr(node.value, "id", None) == "torch"
            imported = isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                n.startswith("torch.cuda") for n in [getattr(node, "module", None) or ""] + [a.name for a in node.names])
            if attribute or imported:
                found.append(f"{name}:{node.lineno}")
    assert found == []
