"""The ``rubin`` command: one table of subcommands and one error boundary.

Each subcommand lives in ``rubin.cli.<name>`` and exposes ``add_arguments(parser)`` and
``run(args) -> int``. Only the chosen command's module is imported, so ``rubin --help``
never imports torch and answers instantly. Command modules must keep heavy imports
(torch, matplotlib) inside ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from rubin import __version__
from rubin.errors import ExitCode, RubinError
from rubin.platform.launcher import tell_torchrun
from rubin.redact import redact

# name -> (module, one-line help). The order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("rubin.cli.train", "train a model (with no CONFIG: the ViT-on-digits demo)"),
    "doctor": ("rubin.cli.doctor", "diagnose this machine: findings with evidence, cause and fix"),
    "env": ("rubin.cli.env", "print the environment fingerprint, to paste into an issue"),
    "bench": ("rubin.cli.bench", "micro and model benchmarks, with statistics, as one results file"),
    "compare": ("rubin.cli.compare", "compare two benchmark results files: rules, outliers, env diff"),
    "plan": ("rubin.cli.plan", "will it fit, how long will it take, what will it cost"),
    "checkpoint": ("rubin.cli.checkpoint", "inspect and verify a run's checkpoints"),
    "export": ("rubin.cli.export", "write a run's trained weights (torch, safetensors or HF layout)"),
    "launch": ("rubin.cli.launch", "run the same job on torchrun, Slurm, Kubernetes, Azure ML or SkyPilot"),
    "verify": ("rubin.cli.verify", "check that convergence did not change between two platforms"),
    "profile": ("rubin.cli.profile", "read a profiled run's traces: per-rank breakdown, straggler, the bottleneck and its fix"),
    "report": ("rubin.cli.report", "one self-contained HTML (or Markdown) report from rubin's outputs"),
    "qualify": ("rubin.cli.qualify", "acceptance run for a new node: doctor, bench, verify, report, certificate"),
}


def _chosen(argv: list[str]) -> str | None:
    for tok in argv:
        if tok in COMMANDS:
            return tok
        if not tok.startswith("-"):
            return None
    return None


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks and versions on errors")
    parser = argparse.ArgumentParser(
        prog="rubin",
        description="Take a PyTorch training job onto a new GPU platform, production grade.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"rubin {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = _chosen(argv)
    # The subcommand's copy of --debug must not reset `rubin --debug CMD` to False.
    sub_common = argparse.ArgumentParser(add_help=False)
    sub_common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks and versions on errors")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, parents=[sub_common])
        if name == chosen:
            importlib.import_module(module).add_arguments(p)
    return parser


def _versions() -> str:
    import platform

    parts = [f"rubin {__version__}", f"python {platform.python_version()}"]
    torch = sys.modules.get("torch")
    if torch is not None:
        parts.append(f"torch {torch.__version__}")
    return ", ".join(parts)


def _silence_stdout() -> None:
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (tests capture it)
        pass


def _say(line: str) -> None:
    """The one error line: on stderr, and under torchrun also in the error file its summary reads."""
    print(line, file=sys.stderr)
    tell_torchrun(line)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help exits 0, bad usage exits 2
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help()
        return int(ExitCode.USAGE)
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except RubinError as err:
        # a preemption after a committed checkpoint is an orderly stop (exit 75), not an error
        label = "" if err.exit_code == ExitCode.PREEMPTED else "error: "
        _say(f"rubin: {label}{redact(str(err))}")
        if args.debug:
            traceback.print_exc()
            print(_versions(), file=sys.stderr)
        return int(err.exit_code)
    except KeyboardInterrupt:
        print("rubin: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        # `rubin ... | head`: the reader left. Not an error; stop writing without a second traceback at exit.
        _silence_stdout()
        return int(ExitCode.OK)
    except SystemExit as exc:
        if isinstance(exc.__context__, BrokenPipeError):  # rich's Console answers a closed pipe with SystemExit(1)
            _silence_stdout()
            return int(ExitCode.OK)
        raise
    except Exception as err:  # noqa: BLE001 - the one boundary that turns bugs into one line
        line = f"rubin: internal error: {type(err).__name__}: {redact(str(err))}"
        if args.debug:
            traceback.print_exc()
            print(_versions(), file=sys.stderr)
            tell_torchrun(line)
        else:
            _say(f"{line} (rerun with --debug for the traceback)")
        return int(ExitCode.FAILURE)
