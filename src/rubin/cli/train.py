"""``rubin train [CONFIG] [--set k=v ...]``: the production training loop."""

from __future__ import annotations

import argparse
import os
import sys
import time

from rubin.errors import ExitCode, UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML config (default: the ViT-on-digits demo)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set optim.lr=1e-3 (repeatable)")
    p.add_argument("--no-resume", action="store_true", help="do not resume from the run dir's newest checkpoint")
    p.add_argument("--force", action="store_true", help="accept a different config in an existing run dir: the old run is moved aside")
    p.add_argument("--quiet", action="store_true", help="no progress output (the run dir is written as usual)")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("--from-deepspeed", metavar="DS_CONFIG", help="map a DeepSpeed ds_config.json onto this config "
                   "(applied before --set; every key is mapped, or refused, or its difference stated)")
    p.add_argument("--help-config", action="store_true", help="list every config key with its default and meaning")
    p.add_argument("--verify-checkpoints", action="store_true", help="verify the run dir's checkpoints and exit, without training")
    p.add_argument("--json", action="store_true", help="print the summary as JSON at the end")
    p.add_argument("--profile", action="store_true", help="trace a window of steps on every rank (profile.enabled=true); "
                   "read it with `rubin profile RUN_DIR`")


def _deepspeed_overrides(path: str, *, quiet: bool) -> list[str]:
    from rubin.platform.launcher import detect
    from rubin.train import deepspeed

    mapping, notes = deepspeed.load(path, detect(os.environ).world_size)
    if notes and not quiet:
        print(f"from-deepspeed: {'; '.join(notes)}", file=sys.stderr)
    return deepspeed.as_overrides(mapping)


SILENT_RANK_WAIT_S = 60.0


def _another_local_rank_says_it() -> bool:
    """Under torchrun every rank of a node reads the same config and files and meets the same error
    before the group forms: local rank 0 prints the line, the others say nothing."""
    return "TORCHELASTIC_RUN_ID" in os.environ and os.environ.get("LOCAL_RANK", "0") != "0"


def run(args) -> int:
    from rubin.train.config import describe_fields, load_config

    if args.help_config:
        print(describe_fields())
        return 0
    overrides = args.overrides + (["profile.enabled=true"] if args.profile else [])
    try:
        if args.from_deepspeed:
            overrides = _deepspeed_overrides(args.from_deepspeed, quiet=args.quiet or args.json) + overrides
        cfg = load_config(args.config, overrides)
        if cfg.launch is not None:  # train ignores it, but a typo in it is still bad input here, not at launch time
            from rubin.launch.spec import launch_section

            launch_section(cfg.launch)
    except UsageError:
        if _another_local_rank_says_it():
            # Never exit first: torchrun ends the other ranks when one fails, and on a busy machine it
            # ended local rank 0 before it printed the line. Local rank 0 exits 2 and torchrun ends this one.
            time.sleep(SILENT_RANK_WAIT_S)
            return int(ExitCode.USAGE)
        raise
    if args.print_config:
        print(cfg.to_yaml(), end="")
        return 0
    if args.verify_checkpoints:
        from rubin.cli.checkpoint import verify_dir

        return verify_dir(str(cfg.run_dir), as_json=args.json)
    from rubin.train.observe.console import Console
    from rubin.train.trainer import train

    # A preemption raises Preempted (exit 75); the CLI boundary prints it like any RubinError.
    summary = train(cfg, force=args.force, resume=not args.no_resume, console=Console(quiet=args.quiet or args.json))
    if args.json:
        import json

        print(json.dumps(summary, indent=2))
    return 0
