"""What a person sees: a progress bar with ETA on a TTY (rank 0), plain lines elsewhere, a summary table.

The CLI creates the ``Console`` and hands it to ``train(cfg, console=...)``; nothing else in the
library writes to the terminal. ``print`` is progress (rank 0, off under ``--quiet``); ``warn``
and ``notice`` go to stderr on every rank, ``--quiet`` or not (a warning must not be silent).
"""

from __future__ import annotations

import sys


def _fmt_rate(row: dict) -> str:
    if row.get("tokens_per_s"):
        return f"{row['tokens_per_s']:,.0f} tok/s"
    return f"{row['samples_per_s']:,.1f} samples/s"


SMOOTH_S = 120.0  # the window of the ETA's rate


class Console:
    def __init__(self, *, quiet: bool = False):
        self.quiet = quiet
        self.enabled = False  # progress is off until ``begin`` says this rank shows it
        self.tty = False
        self.total = 0
        self._progress = None

    def begin(self, total_steps: int, *, main: bool) -> None:
        """The run's length is known: rank 0 (MAIN) shows progress, as a bar on a TTY."""
        self.enabled = main and not self.quiet
        self.tty = self.enabled and sys.stdout.isatty()
        self.total = total_steps
        if self.tty:
            from rich import progress as rp

            # Updated at log points only (a step between them costs nothing: benchmarks/progress_cost.py).
            # The ETA divides the steps left by the rate over the last SMOOTH_S seconds, so one slow
            # log interval (a checkpoint, an eval, a busy neighbour) does not swing it.
            self._progress = rp.Progress(
                rp.TextColumn("[bold]train"), rp.BarColumn(), rp.MofNCompleteColumn(),
                rp.TextColumn("{task.fields[info]}"), rp.TimeElapsedColumn(), rp.TextColumn("eta"),
                rp.TimeRemainingColumn(), speed_estimate_period=SMOOTH_S,
            )
            self._task = self._progress.add_task("train", total=total_steps, completed=0, info="")
            self._progress.start()

    def start_at(self, step: int) -> None:
        """A resumed run starts its progress bar at the checkpoint's step."""
        if self._progress is not None:
            self._progress.update(self._task, completed=step)

    def print(self, text: str) -> None:
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.console.print(text)
        else:
            print(text, flush=True)

    def warn(self, text: str) -> None:
        """A warning line on stderr, on every rank, also under --quiet."""
        self.notice(f"warning: {text}")

    def notice(self, text: str) -> None:
        """A line on stderr that --quiet does not silence: why the exit waits, why a rank ends."""
        print(text, file=sys.stderr, flush=True)

    def started(self, cfg, strategy: str, info, plan, total_steps: int) -> None:
        self.print(f"rubin train: {cfg.model.import_ or cfg.model.name} on {cfg.data.import_ or cfg.data.name}, "
                   f"{total_steps} steps, {strategy} x{info.world_size} on {info.device}, {cfg.precision}, "
                   f"batch {plan.global_batch} = {info.world_size} ranks x {plan.accum_steps} x {plan.micro_batch}")

    def already_complete(self, summary: dict, run_dir: str) -> None:
        self.print(f"run dir {summary.get('run_dir') or run_dir!r} is already complete at step {summary.get('steps')}: "
                   "nothing to do (use another run.dir, or --force to start over)")
        self.summary(summary, summary.get("checkpoint"))

    def evaluated(self, step: int, result: dict) -> None:
        acc, ppl = result.get("accuracy"), result.get("perplexity")
        metric = f"accuracy {acc:.4f}" if acc is not None else f"perplexity {ppl:.2f}"
        self.print(f"eval step {step}: loss {result['eval_loss']:.4f}  {metric}")

    def logged(self, row: dict) -> None:
        if not self.enabled:
            return
        loss = row.get("loss")
        loss_s = f"{loss:.4f}" if loss is not None else "n/a"
        t = row["time"]
        line = f"loss {loss_s}  {_fmt_rate(row)}  data {t['data_s'] * 1e3:.1f}ms compute {t['compute_s'] * 1e3:.1f}ms"
        if "mfu" in row:
            line += f"  mfu {row['mfu'] * 100:.1f}%"
        if self._progress is not None:
            self._progress.update(self._task, completed=row["step"], info=f"loss {loss_s}  {_fmt_rate(row)}")
        else:
            print(f"step {row['step']}/{self.total}  {line}", flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def summary(self, summary: dict, ckpt_path: str | None) -> None:
        if not self.enabled:
            return
        from rich.console import Console as RichConsole
        from rich.table import Table

        table = Table(title=f"rubin train: {summary['status']}", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        table.add_row("steps", f"{summary['steps']}")
        if summary.get("final_loss") is not None:
            table.add_row("final loss", f"{summary['final_loss']:.4f}")
        for k, v in (summary.get("eval") or {}).items():
            if isinstance(v, float):
                table.add_row(f"eval {k.removeprefix('eval_')}", f"{v:.4f}")
        if summary.get("samples_per_s"):
            rate = f"{summary['samples_per_s']:,.1f} samples/s"
            if summary.get("tokens_per_s"):
                rate += f"  ({summary['tokens_per_s']:,.0f} tokens/s)"
            table.add_row("throughput (median)", rate)
        share = summary.get("time_share") or {}
        if share:
            table.add_row(
                "time split",
                f"data {share.get('data_s', 0) * 100:.1f}%  compute {share.get('compute_s', 0) * 100:.1f}%  "
                f"checkpoint {share.get('ckpt_s', 0) * 100:.1f}%",
            )
        if summary.get("mfu") is not None:
            table.add_row("MFU", f"{summary['mfu'] * 100:.1f}%")
        compiled = summary.get("compile") or {}
        if compiled.get("blocks"):  # kept out of throughput and MFU above
            traced = f", dynamo: {compiled.get('graphs', 0)} graphs, {compiled.get('recompiles', 0)} recompiles"
            table.add_row("compile", f"{compiled['compile_s']:.1f} s (first step, {compiled['blocks']} blocks{traced})")
        table.add_row("wall time", f"{summary['wall_s']:.1f} s")
        table.add_row("run dir", summary["run_dir"])
        if ckpt_path:
            table.add_row("checkpoint", ckpt_path)
        RichConsole(file=sys.stdout).print(table)
