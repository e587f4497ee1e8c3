"""``rubin report INPUTS... -o report.html [--format html|md]``: one page from rubin's outputs.

Inputs are detected by content: run dirs, env/doctor/bench/compare/plan/verify JSON, a qualify
certificate. A file of another kind is refused with one line (exit 2).
"""

from __future__ import annotations

FORMATS = ("html", "md")


def add_arguments(parser) -> None:
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="run dirs and JSON files written by rubin commands")
    parser.add_argument("-o", "--out", default=None, metavar="FILE", help="output file (default: report.html, or report.md)")
    parser.add_argument("--format", default=None, help="html (one self-contained file) or md (figures as SVG files beside it); "
                        "default: from the -o suffix, else html")
    parser.add_argument("--title", default="rubin report", help="the page title")
    parser.add_argument("--force", action="store_true", help="overwrite an existing output file")


def run(args) -> int:
    from pathlib import Path

    from rubin.errors import UsageError, bad_choice

    fmt = args.format or ("md" if args.out and Path(args.out).suffix.lower() == ".md" else "html")
    if fmt not in FORMATS:
        raise bad_choice("--format", fmt, FORMATS)
    out = Path(args.out or f"report.{fmt}")
    if out.is_dir():
        raise UsageError(f"-o {str(out)!r} is a directory; give a file name, e.g. -o {out / ('report.' + fmt)}")
    if out.exists() and not args.force:
        raise UsageError(f"-o {str(out)!r} exists; pass --force to overwrite it, or another -o")
    from rubin.report.page import write

    written = write(args.inputs, out, fmt, args.title)
    print(f"report: {written[0]}" + (f" (+{len(written) - 1} figure files in {written[1].parent})" if len(written) > 1 else ""))
    return 0
