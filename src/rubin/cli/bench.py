"""``rubin bench [SUITE] [--quick] [--out FILE]``: micro and model benchmarks as one results file."""

from __future__ import annotations

import sys

CHOICES = ("matmul", "membw", "h2d", "launch", "collectives", "io", "model", "all")


def add_arguments(parser) -> None:
    parser.add_argument("suite", nargs="?", default="all", metavar="SUITE",
                        help=f"what to run: {', '.join(CHOICES)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="the CPU/CI preset: small sizes, under a minute on 2 cores")
    parser.add_argument("--out", metavar="FILE", help="results file (default: rubin-bench-<time>.json here)")
    parser.add_argument("--json", action="store_true", help="print the results document as JSON instead of tables")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: every local GPU, else the CPU")
    parser.add_argument("--ranks", type=int, metavar="N", help="collectives: ranks to start (default: one per GPU, 2 on CPU)")
    parser.add_argument("--io-dir", metavar="DIR", help="io: the directory to benchmark (your checkpoint directory); default: here")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SUITE.KEY=VALUE",
                        help="override a benchmark parameter, e.g. --set matmul.trials=50 (repeatable)")
    parser.add_argument("--plot", metavar="FILE", help="plot file, .png or .svg (default: next to the results file)")
    parser.add_argument("--no-plot", action="store_true", help="do not write the plot")
    parser.add_argument("--list-gpus", action="store_true", help="print the GPU spec catalog (dense peaks) and exit")
    parser.add_argument("--gpu", metavar="KEY", help="print one catalog row (e.g. H200) and exit")


def _overrides(items: list[str]) -> dict:
    from rubin.bench.suites import SUITES
    from rubin.errors import UsageError, bad_choice, load_yaml_text

    out: dict = {}
    for item in items:
        key, sep, raw = item.partition("=")
        suite, dot, param = key.strip().partition(".")
        if not sep or not dot or not param:
            raise UsageError(f"--set {item!r} is not valid: expected SUITE.KEY=VALUE, e.g. --set matmul.trials=50")
        if suite not in SUITES:
            raise bad_choice(f"--set {key.strip()}: suite", suite, SUITES)
        out.setdefault(suite, {})[param] = load_yaml_text(raw, f"--set {item!r}") if raw.strip() else ""
    return out


def out_paths(out_arg: str | None, plot_arg: str | None, no_plot: bool, stamp: str):
    """(results path, plot path or None), both checked before anything runs.

    ``--out DIR`` (an existing directory) puts the results file inside it, as ``cp`` would; a
    missing or unwritable folder, or a plot type matplotlib cannot write, is refused up front.
    """
    from pathlib import Path

    from rubin.errors import bad_value
    from rubin.runlock import dir_problem

    name = f"rubin-bench-{stamp}.json"
    out = Path(out_arg) if out_arg else Path(name)
    if out.is_dir():
        out = out / name
    if not out.parent.exists() and not out.parent.is_symlink():  # a typo in a path must not become new folders
        raise bad_value("--out", out_arg, f"the folder {str(out.parent)!r} does not exist", "create it first, or fix the path")
    problem = dir_problem(out.parent)
    if problem:
        raise bad_value("--out", out_arg, f"its folder cannot hold the results: {problem}", "pick a path in a writable folder")
    if no_plot:
        return out, None
    plot = Path(plot_arg) if plot_arg else out.with_suffix(".png")
    if plot.suffix.lower() not in PLOT_TYPES:
        raise bad_value("--plot", plot_arg, f"a file ending in {', '.join(PLOT_TYPES)}", "e.g. --plot bench.png, or --no-plot")
    if plot.is_dir():
        raise bad_value("--plot", plot_arg, "a file path, not a directory", "e.g. --plot bench.png, or --no-plot")
    problem = dir_problem(plot.parent)
    if problem:
        raise bad_value("--plot", plot_arg, f"its folder cannot hold the plot: {problem}", "pick a path in a writable folder")
    return out, plot


PLOT_TYPES = (".png", ".svg", ".pdf")


def save_results(doc: dict, out, err):
    """Write the results; if the requested path fails at this late point, next to it (or here) under a printed name."""
    from pathlib import Path

    from rubin.bench import results

    try:
        return results.save(doc, out)
    except OSError as exc:
        for alt in (Path(out).with_name(Path(out).stem + "-rescued.json"), Path.cwd() / Path(out).name):
            try:
                saved = results.save(doc, alt)
            except OSError:
                continue
            err.print(f"rubin bench: could not write {out} ({exc.strerror or exc}); the results are in {saved}")
            return saved
        raise


def _catalog(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from rubin.platform import specs

    rows = [specs.get(args.gpu)] if args.gpu else specs.catalog()
    if args.json:
        import json

        print(json.dumps({"schema_version": 1, "gpus": [r.to_dict() for r in rows]}, indent=2))
        return 0
    console = Console()
    if args.gpu:  # one row: every field, one per line
        row = rows[0]
        t = Table(title=f"{row.key}: {row.name}" + (" (PRELIMINARY vendor figures)" if row.preliminary else ""),
                  show_header=False)
        for name, value in row.to_dict().items():
            mark = " (u)" if name in row.uncertain else ""
            t.add_row(name, ("-" if value is None else ", ".join(map(str, value)) if isinstance(value, list) else str(value)) + mark)
        console.print(t, markup=False)
        return 0
    t = Table(title="GPU spec catalog (dense TFLOPS; (u) = unconfirmed or conflicting sources)")
    cols = ("key", "arch", "cc", "memory", "TB/s", "fp64", "fp32", "tf32", "bf16", "fp8", "fp4", "NVLink GB/s", "TDP W")
    for c in cols:
        t.add_column(c, no_wrap=c == "key")
    for r in rows:
        def v(name):
            x = getattr(r, name)
            return ("-" if x is None else f"{x:g}") + (" (u)" if name in r.uncertain else "")
        t.add_row(r.key + (" (prelim.)" if r.preliminary else ""), r.arch, r.compute_capability or "-",
                  f"{v('memory_gib')} GB {r.memory_type or ''}", v("memory_bw_tbs"), v("fp64"), v("fp32"), v("tf32"),
                  v("bf16"), v("fp8"), v("fp4"), (f"NVLink{r.nvlink_gen} " if r.nvlink_gen else "") + v("nvlink_bw_gbs"), v("tdp_w"))
    console.print(t)
    return 0


def run(args) -> int:
    import datetime as dt
    from pathlib import Path

    from rich.console import Console

    from rubin.errors import ExitCode, UsageError, bad_value

    if args.list_gpus or args.gpu:
        return _catalog(args)
    if args.suite not in CHOICES:
        from rubin.errors import bad_choice

        raise bad_choice("SUITE", args.suite, CHOICES)
    overrides = _overrides(args.overrides)
    set_suites = list(overrides)  # before --ranks and --io-dir add theirs
    if args.ranks is not None:
        if args.ranks < 2:
            raise bad_value("--ranks", args.ranks, "at least 2", "a collective needs peers")
        overrides.setdefault("collectives", {})["ranks"] = args.ranks
    if args.io_dir:
        if not Path(args.io_dir).is_dir():
            raise bad_value("--io-dir", args.io_dir, "an existing directory", "create it first")
        overrides.setdefault("io", {})["dir"] = args.io_dir
    out, plot_path = out_paths(args.out, args.plot, args.no_plot, dt.datetime.now().strftime("%Y%m%d-%H%M%S"))
    err = Console(stderr=True)

    from rubin.bench import suites

    names = list(suites.SUITES) if args.suite == "all" else [args.suite]
    ctx = suites.make_context(args.device, quick=args.quick, workdir=Path(args.io_dir or "."))
    for name in dict.fromkeys([*names, *overrides]):  # every --set value is checked before the first benchmark runs
        suites.resolve_params(name, ctx, overrides)
    idle = [s for s in set_suites if s not in names]  # a --set that changes nothing is a mistake, not a no-op
    if idle:
        raise UsageError(f"--set {idle[0]}.* is for a suite this command does not run (it runs {args.suite}); "
                         f"run 'rubin bench {idle[0]}', or drop the --set")
    if ctx.gpu_count == 0 and not args.quick:
        err.print("rubin bench: no GPU here, so the CPU preset (--quick sizes) is used; the full preset is for GPUs")
        ctx.quick = True
    for w in ctx.spec_warnings:
        err.print(f"rubin bench: warning: {w}")
    doc = _run_with_progress(names, ctx, overrides, err)
    out = save_results(doc, out, err)
    plot_path = _plot(doc, plot_path, err)
    if args.json:
        import json

        print(json.dumps(doc, indent=2))
    else:
        from rubin.bench.render import tables

        console = Console()
        for t in tables(doc, width=console.width):
            console.print(t)
        console.print(f"results: {out}" + (f"   plot: {plot_path}" if plot_path else ""))
    from rubin.bench.load import caveats

    for line in caveats(doc, "these results"):  # a figure from a busy machine must not pass as the machine's
        err.print(f"rubin bench: warning: {line}; rerun on an idle machine before acting on them", markup=False, soft_wrap=True)
    failed = [n for n, e in doc["benchmarks"].items() if e["status"] == "error"]
    if failed:
        err.print(f"rubin bench: {', '.join(failed)} failed; see 'not measured / errors' (results still written to {out})")
        return int(ExitCode.FAILURE)
    return 0


def _run_with_progress(names, ctx, overrides, err):
    from rubin.bench import suites

    if err.is_terminal:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err, transient=True) as bar:
            task = bar.add_task("starting", total=len(names))
            ctx.progress = lambda msg: bar.update(task, description=msg)
            return suites.run(names, ctx, overrides, on_done=lambda n, e: bar.advance(task))
    # Not a TTY (CI, logs): one plain line per finished benchmark.
    def done(name, entry):
        print(f"rubin bench: {name} {entry['status']} ({entry['wall_s']:.1f} s)", file=sys.stderr, flush=True)
    return suites.run(names, ctx, overrides, on_done=done)


def _plot(doc, plot_path, err):
    if plot_path is None:
        return None
    from rubin.bench import plots

    if not plots.available():
        err.print("rubin bench: matplotlib is not installed, so no plot (pip install 'rubin[plot]')")
        return None
    try:
        return plots.write(doc, plot_path)
    except (OSError, ValueError) as exc:  # the results are already saved: a failed plot is a warning, not a loss
        err.print(f"rubin bench: warning: could not write the plot {plot_path}: {exc}")
        return None
