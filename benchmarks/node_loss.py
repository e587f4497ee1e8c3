"""Each fault of the emulated cluster's injector list, put on one host of a running 2-host job, measured.

    python benchmarks/node_loss.py [--repeat N] [--only crash,partition,...]

Needs root (scripts/local-cluster.sh). For every fault it prints: the time from the fault to the first
line that names it (detection), the time from the fault to the next training step, the steps lost
(the steps redone after the resume; never past the last committed checkpoint), whether the host was
named, the nodes' exit codes, and whether the final param_digest equals the uninterrupted run's.
Faults that only act when something starts (a clock offset, a bad hosts entry) are put on before the
job starts; their detection is the time to the one line, and the job is expected to stop there.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "cluster"), str(ROOT / "tests")]

from clusterkit import make  # noqa: E402
from jobkit import Job, committed, node_command, steps_logged, summary, write_config  # noqa: E402

STEPS, EVERY, AT = 80, 10, 35
PAUSE = {"RUBIN_FAULT": f"pause@step={AT},seconds=300"}


def wait(cond, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    return None


def rows(run: Path) -> int:
    try:
        return sum(1 for ln in (run / "metrics.jsonl").read_text().splitlines() if ln.strip())
    except OSError:
        return 0


def scenario(name: str, base_digest: str) -> dict:
    c = make(2)
    job = None
    try:
        sets = ["--set", "launch.hang_timeout_s=6"]
        nodes = 2
        if "1:2" in name:
            sets, nodes = sets + ["--set", "launch.rdzv_last_call_s=2"], "1:2"
        config = write_config(c.shared / "train.yaml", steps=STEPS, every=EVERY)
        job = Job(c, node_command(config, c.shared / "run", nodes, *sets), c.shared)
        run = c.shared / "run"
        at_start = {"clock offset +40s": ("clock", "+40s"), "bad hosts entry": ("hosts-entry", "- nodeA")}
        victim = "nodeA" if name.startswith("rendezvous host") else "nodeB"
        if name in at_start:
            c.inject("nodeB", *at_start[name])
        paused = name.startswith(("crash", "rendezvous host"))
        job.start("nodeA", env=PAUSE if paused and victim == "nodeA" else None)
        job.start("nodeB", env=PAUSE if paused and victim == "nodeB" else None)
        saved = 0
        if name not in at_start:
            if paused:
                wait(lambda: "rubin-fault: pause" in job.log(victim), 120)
            else:
                wait(lambda: max(steps_logged(run), default=0) >= AT, 120)
            saved = max(committed(run), default=0)
        t0, n0, done = time.time(), rows(run), max(steps_logged(run), default=0)
        if name not in at_start:
            apply(c, name, victim, job)
        named = next_step = None
        healed = False
        while any(p.poll() is None for p in job.procs.values()) and time.time() - t0 < 400:
            logs = job.log("nodeA") + job.log("nodeB") + job.log(victim, "-r")
            if named is None:
                hit = next((ln for ln in logs.splitlines() if ln.startswith(("rubin: ", "rubin agent")) and victim in ln
                            and "warning" not in ln), None)
                if hit:
                    named = (time.time() - t0, hit)
            if next_step is None and rows(run) > n0:
                next_step = time.time() - t0
            if not healed and name == "silent partition" and named:
                c.heal(victim)
                healed = True
            time.sleep(0.1)
        codes = {h: p.poll() for h, p in job.procs.items()}
        s = summary(run) if (run / "summary.json").exists() else {}
        logs = job.log("nodeA") + job.log("nodeB") + job.log(victim, "-r")
        resumed = [int(m) for m in re.findall(r"resuming from step (\d+)", logs)]
        return {"fault": name, "detect_s": named[0] if named else None, "next_step_s": next_step, "named": bool(named),
                "resumed_from": resumed[-1] if resumed else None, "committed_at_fault": saved, "exit": codes,
                "redone": done - resumed[-1] if resumed else 0,
                "status": s.get("status"), "digest_match": s.get("param_digest") == base_digest,
                "line": named[1][:170] if named else ""}
    finally:
        if job is not None:
            job.stop()
        c.down()


def apply(c, name, victim, job):
    if name.startswith("crash") or name.startswith("rendezvous host"):
        c.inject(victim, "crash")
        if "replacement" in name and "no replacement" not in name:
            if name.startswith("rendezvous host"):
                wait(lambda: "is gone" in job.log("nodeB"), 180)
            c.revive(victim)
            job.start(victim, tag="-r")
    elif name == "silent partition":
        c.inject(victim, "partition")
    elif name == "closed port (rendezvous, reject)":
        c.inject("nodeA", "close", "29400")
    elif name == "bandwidth cap 20mbit":
        c.inject(victim, "cap", "20mbit")
    elif name == "random loss 5%":
        c.inject(victim, "loss", "5")
    elif name == "MTU 9000 on one host":
        c.inject(victim, "mtu", "9000")


FAULTS = ["crash (replacement)", "crash (no replacement, nodes 1:2)", "rendezvous host crash (replacement)", "silent partition",
          "closed port (rendezvous, reject)", "bandwidth cap 20mbit", "random loss 5%", "MTU 9000 on one host", "clock offset +40s",
          "bad hosts entry"]


def median(tries: list[dict], key: str) -> str:
    values = [t[key] for t in tries if t[key] is not None]
    if not values:
        return "-"
    spread = f" ({min(values):.1f}-{max(values):.1f})" if len(values) > 1 else ""
    return f"{statistics.median(values):.1f}{spread}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--only", default="", help="comma-separated prefixes of the fault names")
    args = p.parse_args()
    c = make(2)
    try:
        config = write_config(c.shared / "train.yaml", steps=STEPS, every=EVERY)
        job = Job(c, node_command(config, c.shared / "run", 2), c.shared)
        job.start("nodeA"), job.start("nodeB")
        job.wait("nodeA", 300), job.wait("nodeB", 300)
        digest = summary(c.shared / "run")["param_digest"]
    finally:
        c.down()
    picked = [f for f in FAULTS if not args.only or any(f.startswith(o) for o in args.only.split(","))]
    print("| fault | detection s | to next step s | steps redone (resumed from / committed at the fault) | host named | exit codes "
          "| status | digest |")
    print("|---|---|---|---|---|---|---|---|")
    for name in picked:
        tries = [scenario(name, digest) for _ in range(args.repeat)]
        r = tries[-1]
        cells = [name, median(tries, "detect_s"), median(tries, "next_step_s"),
                 f"{r['redone']} ({r['resumed_from']} / {r['committed_at_fault']})",
                 "yes" if all(t["named"] for t in tries) else "no", str(r["exit"]), str(r["status"]),
                 "match" if all(t["digest_match"] for t in tries) else ("differs" if r["status"] == "completed" else "-")]
        print("| " + " | ".join(cells) + " |", flush=True)
        print(f"    line: {r['line']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
