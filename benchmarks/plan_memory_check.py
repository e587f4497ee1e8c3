"""The memory planner against the allocator on this machine's device: ``plan_accuracy.py`` on CUDA when
there is a GPU (GPT-124M, ViT, ResNet-50 in bf16 against max_memory_allocated), else its CPU cases."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plan_accuracy import main  # noqa: E402

if __name__ == "__main__":
    from rubin.platform import device

    sys.exit(main(["--device", "cuda" if device.cuda_available() else "cpu", *sys.argv[1:]]))
