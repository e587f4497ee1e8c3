#!/usr/bin/env bash
# On a machine with a package index: download the wheels the GPU image lacks into .whl/ (git-ignored),
# for the GPU image's Python and platform, so scripts/gpu-check.sh can install them with
# `pip install --no-index --find-links .whl` on a node without network access.
#
#   bash scripts/gpu-wheels.sh                 # CPython 3.12, manylinux x86_64 (the recorded H200 image)
#   PYVER=3.11 bash scripts/gpu-wheels.sh
#
# The list is the closure of what rubin imports that the image does not ship: pydantic and its
# dependencies, rich and its dependencies, nvidia-ml-py, pyyaml, and torchao (installed without its
# dependencies: it must not replace the image's torch).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
PYVER=${PYVER:-3.12}
DEST=${DEST:-.whl}
mkdir -p "$DEST"
PLATFORM=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
"$PY" -m pip download --quiet --dest "$DEST" --only-binary=:all: --python-version "$PYVER" --implementation cp \
  "${PLATFORM[@]}" pydantic pydantic-core annotated-types typing-inspection typing-extensions \
  rich markdown-it-py mdurl pygments nvidia-ml-py pyyaml
"$PY" -m pip download --quiet --dest "$DEST" --only-binary=:all: --no-deps --python-version "$PYVER" \
  --implementation cp "${PLATFORM[@]}" torchao
ls -1 "$DEST"
