"""The headline figures of ``SUITE=speed scripts/gpu-check.sh``, one line each, from the files in OUT."""

import json
import pathlib
import sys


def rows(path: pathlib.Path) -> list[dict]:
    try:
        return [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")]
    except (OSError, ValueError):
        return []


def summary(path: pathlib.Path) -> dict:
    return next((r for r in reversed(rows(path)) if r.get("summary")), {})


def main(out: pathlib.Path) -> None:
    for r in rows(out / "gpu-peers.jsonl"):
        if "ms_per_step" in r:
            print(f"peers {r['side']}: {r['ms_per_step']:.1f} ms/step (range {r['ms_range']}), tokens/s "
                  f"{r.get('tokens_per_s') or 0:,.0f}, MFU {r.get('mfu')}, peak {r.get('peak_gb')} GB")
    print(f"peers speed vs plain: {summary(out / 'gpu-peers.jsonl').get('speed_vs_plain')}  (target: rubin >= 1.0)")
    s = summary(out / "fp8-llama.jsonl")
    print(f"fp8 llama-1b: tokens/s {s.get('tokens_per_s')}  fp8/bf16 {s.get('fp8_over_bf16')}  (target >= 1.25)")
    s = summary(out / "fused-loss-memory.jsonl")
    print(f"fused loss: peak saved {s.get('peak_saved')}  speed fused/plain {s.get('speed_fused_over_plain')}  "
          "(target: saved >= 0.30)")
    for name in ("compile-cold.json", "compile-warm.json"):
        try:
            d = json.loads((out / name).read_text())
        except (OSError, ValueError):
            d = {}
        print(f"{name}: compile {d.get('compile')}  MFU {d.get('mfu')}  (targets: cold <= 60 s, warm <= 15 s, MFU >= 0.45)")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]))
