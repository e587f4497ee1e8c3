"""``rubin export RUN [--to PATH] [--format torch|safetensors|hf] [--force] [--json]``.

Writes the model weights of RUN's newest verified checkpoint, consolidated from FSDP shards, with
wrapper prefixes removed. Exit 0 written, 1 no verified checkpoint, 2 bad arguments or an
existing target without --force.
"""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("run", metavar="RUN", help="the run dir (run.dir of the training run, e.g. runs/demo)")
    p.add_argument("--to", metavar="PATH", help="output file, or folder for --format hf (default: RUN/export/...)")
    p.add_argument("--format", default="torch", metavar="FORMAT",
                   help="torch (a torch.save state dict), safetensors (needs the safetensors package) "
                        "or hf (save_pretrained layout, for Hugging Face models); default torch")
    p.add_argument("--force", action="store_true", help="replace PATH if it exists (only after the new file is complete)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")


def run(args) -> int:
    from rubin.train.checkpoint.export import export

    result = export(args.run, args.to, args.format, force=args.force)
    if args.json:
        import json

        print(json.dumps({"version": 1, **result}, indent=2))
        return 0
    for note in result["skipped"]:
        print(f"skipped a newer checkpoint that does not verify: {note}")
    print(f"exported {result['tensors']} tensors ({result['numel']:,} values) from step {result['step']} "
          f"({result['checkpoint']}, verified) to {result['path']} [{result['format']}]")
    return 0
