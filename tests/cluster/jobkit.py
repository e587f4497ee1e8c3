"""Running a rubin training job across the emulated cluster's hosts, as a user would.

Each host runs the command that ``rubin launch local CONFIG --nodes N --set launch.rdzv_host=nodeA
--dry-run`` prints for it; its output goes to a log file on the shared folder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from clusterkit import ROOT, local_cluster
from utils import invoke

EXAMPLE = ROOT / "examples" / "mlp_synthetic.yaml"


def write_config(path: Path, steps: int = 60, every: int = 10, **sections) -> Path:
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg["run"].update(max_steps=steps, deterministic=True, eval_every_steps=0)
    cfg["checkpoint"] = {"every_steps": every, "preemption_grace_s": 10}
    cfg["telemetry"] = {"log_every_steps": 1}
    cfg["distributed"] = {"backend": "gloo", "timeout_s": 60}
    for k, v in sections.items():
        cfg.setdefault(k, {}).update(v)
    path.write_text(yaml.safe_dump(cfg))
    return path


def node_command(config: Path, run_dir: Path, nodes: int | str, *sets: str) -> str:
    r = invoke(["launch", "local", config, "--gpus-per-node", "1", "--set", f"launch.nodes={nodes}",
                "--set", "launch.rdzv_host=nodeA", "--set", f"launch.run_dir={run_dir}", "--set", "launch.accelerator=cpu",
                "--set", f"launch.python={sys.executable}", *sets, "--dry-run"])
    assert r.exit_code == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


@dataclass
class Job:
    cluster: local_cluster.Cluster
    command: str
    logs: Path
    procs: dict = field(default_factory=dict)  # host -> Popen of its node command (the latest)

    def start(self, host: str, env: dict | None = None, tag: str = "") -> subprocess.Popen:
        log = open(self.logs / f"{host}{tag}.log", "w")
        full = {k: v for k, v in os.environ.items() if k != "RUBIN_FAULT"}  # a fault only where a test puts one
        full.update(OMP_NUM_THREADS="1", **(env or {}))
        proc = self.cluster.popen(host, ["bash", "-c", self.command], stdout=log, stderr=subprocess.STDOUT, env=full)
        log.close()
        self.procs[host] = proc
        return proc

    def log(self, host: str, tag: str = "") -> str:
        try:
            return (self.logs / f"{host}{tag}.log").read_text(errors="replace")
        except OSError:
            return ""

    def wait(self, host: str, timeout: float) -> int:
        try:
            return self.procs[host].wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{host}'s node command did not end in {timeout} s; its log:\n{self.log(host)[-3000:]}") from None

    def stop(self) -> None:
        for proc in self.procs.values():
            local_cluster.stop(proc, timeout=5)


def wait_for(cond, timeout: float, what: str, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def steps_logged(run_dir: Path) -> dict[int, float]:
    """Loss per step, the last attempt of each (a step re-done after a resume is logged again)."""
    out = {}
    try:
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                out[row["step"]] = row["loss"]
    except (OSError, ValueError):
        pass
    return out


def events(run_dir: Path, kind: str | None = None) -> list[dict]:
    try:
        rows = [json.loads(ln) for ln in (run_dir / "events.jsonl").read_text().splitlines() if ln.strip()]
    except OSError:
        return []
    return [r for r in rows if kind is None or r.get("kind") == kind]


def resumed_from(text: str) -> list[int]:
    return [int(m) for m in re.findall(r"resuming from step (\d+)", text)]


def committed(run_dir: Path) -> list[int]:
    return sorted(int(p.name.split("-")[1]) for p in (run_dir / "checkpoints").glob("step-*") if (p / "COMMITTED").exists())
