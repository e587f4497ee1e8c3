"""Local: the torchrun command line, and running it here.

Every node runs the same command; the c10d rendezvous gives each its rank. With the default
``rdzv_host`` (127.0.0.1) ``rubin launch local`` starts all ``nodes`` agents on this machine, each
with its ranks like a separate machine, and supervises them: when a node dies from a signal (a lost
machine) the whole job re-forms (every agent stops and starts again, up to ``max_restarts`` times)
and the ranks resume from the last committed checkpoint. (A restarted torchrun agent does not
reliably rejoin a running c10d round in torch 2.x: its next rendezvous round times out.) With a
remote ``rdzv_host``, run the printed command on each machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from rubin.errors import ExitCode, UsageError
from rubin.launch.job import SHARED_STORE_OFF, Job, Launched, check_run_dir, shell_join
from rubin.launch.submit import write

NAME = "local"
EXTENSION = "sh"
CONTAINER = False
SECRETS_FROM_SHELL = True
SUBMIT = None  # runs torchrun itself
INSTALL = ""  # torchrun comes with torch
REFORM_WAIT_S = 5.0


def on_this_machine(job: Job) -> bool:
    """Whether every node's agent starts here (the default rendezvous host) rather than on other machines."""
    return job.launch.rdzv_host in (None, "127.0.0.1", "localhost", "::1")


def check(job: Job, cfg, env: dict) -> None:
    from rubin.workloads.registry import check_arguments

    # The ranks start here: a bad model or data argument is one line now, not one per rank.
    check_arguments((cfg.model.name, cfg.model.import_, cfg.model.args), (cfg.data.name, cfg.data.import_, cfg.data.args))
    if not on_this_machine(job):  # agents on one machine share its disk
        check_run_dir(job, env, container=CONTAINER)


def rdzv_endpoint(job: Job) -> str:
    return f"{job.launch.rdzv_host or '127.0.0.1'}:{job.launch.rdzv_port}"


def agent_argv(job: Job) -> list[str]:
    """What each node runs: torchrun itself when every agent starts here (this module supervises them), rubin's
    agent around it when the nodes are other machines (``agent.py``: checks, rejoining a lost rendezvous)."""
    if on_this_machine(job) or job.launch.nodes == 1:
        return job.torchrun(endpoint=rdzv_endpoint(job), rdzv_id=job.name)
    return job.agent(endpoint=rdzv_endpoint(job), rdzv_id=job.name)


def render(job: Job) -> str:
    lc = job.launch
    head = [f"# Written by `rubin launch local`: job {job.name!r}, {lc.nodes} node(s) x {job.nproc} rank(s)."]
    if lc.nodes > 1:
        where = (f"{lc.nodes} times on this machine" if lc.rdzv_host in (None, "127.0.0.1", "localhost")
                 else f"once on each of the {lc.nodes} machines, {lc.rdzv_host} first")
        head.append(f"# Run this command {where}; the c10d rendezvous at {rdzv_endpoint(job)} assigns the ranks.")
    env = [f"{k}={v}" for k, v in lc.env.items()]
    if lc.secrets:
        head.append(f"# secrets {', '.join(lc.secrets)}: taken from the environment of the shell that runs it")
    prefix = ("env " + shell_join(env, keep_vars=False) + " ") if env else ""
    command = (f"TORCH_ELASTIC_SHUTDOWN_TIMEOUT={job.grace_s} {SHARED_STORE_OFF} {prefix}"
               f"{shell_join(agent_argv(job), keep_vars=False)}")
    return "\n".join(head + lc.setup + [command]) + "\n"


def submit(job: Job, text: str, out: str | None, env: dict, say=print) -> Launched:
    """Run the job here: check this machine's GPUs, keep the script in OUT when given, start and supervise the agents."""
    check_local_gpus(job)
    if out:
        write(out, text)
    return Launched(job.target, text, out, exit_code=run(job, say=say), warnings=list(job.warnings))


def check_local_gpus(job: Job) -> None:
    """Agents started here share this machine's GPUs: it must have nodes x gpus_per_node of them (NVML)."""
    lc = job.launch
    if lc.accelerator != "gpu" or not on_this_machine(job):
        return
    from rubin.platform import nvml

    handle = nvml.get()
    try:
        count = handle.device_count() if handle is not None else 0
    except nvml.NvmlError:
        count = 0
    need = lc.nodes * lc.gpus_per_node
    if count < need:
        why = "" if handle is not None else f" (NVML: {nvml.load_error()[0] or 'not available'})"
        raise UsageError(f"launch.gpus_per_node={lc.gpus_per_node} is not valid: {lc.nodes} node(s) x {lc.gpus_per_node} GPUs "
                         f"on this machine need {need}, and it has {count}{why}; ask for fewer, "
                         "or set launch.accelerator=cpu for CPU ranks")


def run(job: Job, *, say=print) -> int:
    """Start the agents here, supervise them, and return 0 / 75 / 1 from the run's summary."""
    from rubin.launch.status import attempt_status

    os.makedirs(job.run_dir, exist_ok=True)
    env = dict(os.environ, **job.launch.env, TORCH_ELASTIC_SHUTDOWN_TIMEOUT=str(job.grace_s), TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    env.setdefault("OMP_NUM_THREADS", "1")
    start = time.time()
    nodes = _Nodes(job, env, say)
    stopping = False

    def forward(signum, frame):  # a signal to us is a signal to the job: each agent passes it to its ranks once
        nonlocal stopping
        stopping = True
        nodes.signal(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)  # torchrun ignores USR1 by default

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    restarts = 0
    try:
        nodes.start()
        while True:
            codes = nodes.poll()
            if all(c is not None for c in codes):
                break
            lost = [i for i, c in enumerate(codes) if c is not None and c < 0]
            if lost and not stopping:
                # A node died from a signal (a lost machine). torchrun 2.x does not reliably let a restarted
                # agent rejoin a running c10d round, so the whole job re-forms: every agent stops and starts
                # again, and the ranks resume from the last committed checkpoint.
                name = signal.Signals(-codes[lost[0]]).name
                if restarts >= job.launch.max_restarts:
                    say(f"rubin launch: node {lost[0]} died ({name}); no restarts left (launch.max_restarts={job.launch.max_restarts})")
                    stopping = True
                    nodes.stop()
                    continue
                restarts += 1
                say(f"rubin launch: node {lost[0]} died ({name}); re-forming the job ({restarts}/{job.launch.max_restarts})")
                # The survivors cannot save (their collectives lost a peer) and can hang in teardown: a short
                # wait, then they are killed. Only committed checkpoints count, so nothing half-written is used.
                nodes.stop(grace=REFORM_WAIT_S)
                start_again = time.time()
                nodes.start()
                say(f"rubin launch: re-formed in {time.time() - start_again:.1f} s")
            time.sleep(0.2)
    finally:
        for s, prev in previous.items():
            signal.signal(s, prev)
        nodes.stop(grace=0)
    status = attempt_status(job.run_dir, start)
    say(f"rubin launch: agents exited {nodes.codes()}; the run: {status}")
    if status == "completed":
        return int(ExitCode.OK)
    if status == "preempted":
        return int(ExitCode.PREEMPTED)
    return int(ExitCode.FAILURE)


class _Nodes:
    """The agents of one job on this machine, and the ranks each started (they run in their own sessions)."""

    def __init__(self, job: Job, env: dict, say):
        self.job, self.env, self.say = job, env, say
        self.argv = agent_argv(job)
        self.agents: list[subprocess.Popen] = []
        self.ranks: dict[int, set[int]] = {}

    def start(self) -> None:
        lc = self.job.launch
        # The first agent hosts the c10d store (the first to bind the port does); the others start once
        # it listens, so node 0 is the head, as on a real cluster.
        self.agents = [_start(self.argv, self._env(0))]
        if lc.nodes > 1:
            _wait_listening(lc.rdzv_host or "127.0.0.1", lc.rdzv_port, self.agents[0])
        self.agents += [_start(self.argv, self._env(i)) for i in range(1, lc.nodes)]
        self.say(f"rubin launch: {len(self.agents)} torchrun agent(s) on this machine, rendezvous {rdzv_endpoint(self.job)}, "
                 f"pids {' '.join(str(a.pid) for a in self.agents)}; run dir {self.job.run_dir}")

    def _env(self, node: int) -> dict:
        """Node i's environment: with GPUs, its own gpus_per_node devices, as on a separate machine."""
        g = self.job.launch.gpus_per_node
        if self.job.launch.accelerator != "gpu" or self.job.launch.nodes == 1:
            return self.env
        return dict(self.env, CUDA_VISIBLE_DEVICES=",".join(str(d) for d in range(node * g, (node + 1) * g)))

    def poll(self) -> list[int | None]:
        for a in self.agents:
            if a.poll() is None:
                self.ranks[a.pid] = descendants(a.pid)
        return [a.poll() for a in self.agents]

    def codes(self) -> list[int | None]:
        return [a.returncode for a in self.agents]

    def signal(self, signum) -> None:
        for a in self.agents:
            _signal(a, signum, group=False)

    def stop(self, grace: float | None = None) -> None:
        """TERM every agent, wait up to the grace period, then kill what is left, ranks included."""
        grace = self.job.grace_s if grace is None else grace
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(a.poll() is None for a in self.agents):
            time.sleep(0.1)
        for a in self.agents:
            if a.poll() is None:
                _signal(a, signal.SIGKILL)
            a.wait()
            _kill_all(self.ranks.pop(a.pid, set()))


def descendants(pid: int) -> set[int]:
    """Every process below PID, from /proc (Linux); empty where /proc is not there."""
    parent: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return set()
    for name in names:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def _kill_all(pids: set[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_listening(host: str, port: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)


def _start(argv: list[str], env: dict) -> subprocess.Popen:
    # Its own session: the agent and its ranks form one group, killed together like a lost machine.
    return subprocess.Popen(argv, env=env, start_new_session=True)


def _signal(proc: subprocess.Popen, signum, *, group: bool = True) -> None:
    try:
        os.killpg(proc.pid, signum) if group else proc.send_signal(signum)
    except (ProcessLookupError, PermissionError):
        pass
