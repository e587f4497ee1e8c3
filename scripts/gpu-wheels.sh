#!/usr/bin/env bash
# On a machine with a package index: download the wheels the GPU image lacks into an emptied .whl/
# (git-ignored), for the GPU image's Python and platform, so the GPU check can install them with
# `pip install --no-index --no-deps --no-compile --target` on a node without network access.
#
#   bash scripts/gpu-wheels.sh                 # CPython 3.12, manylinux x86_64 (the recorded H200 image)
#   PYVER=3.11 bash scripts/gpu-wheels.sh
#
# The image (torch 2.11.0+cu130, triton 3.6.0, Lightning, transformers, nvidia-ml-py, rich, pygments,
# pyyaml, typing-extensions) lacks only these. Each is pinned and downloaded without its dependencies,
# so nothing here can replace a package of the image (torch above all):
#   pydantic and its three dependencies (pydantic pins its pydantic-core exactly);
#   torchao 0.18.0, the last release whose .so loads and whose float8 code runs on torch 2.11;
#   liger-kernel 0.8.5 (pure Python over Triton: model.fused_loss=liger, and auto's choice on CUDA).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
PYVER=${PYVER:-3.12}
DEST=${DEST:-.whl}
WHEELS=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
        torchao==0.18.0 liger-kernel==0.8.5)
# emptied first: two versions of one package in the folder would make the install refuse the whole set
rm -rf "$DEST"
mkdir -p "$DEST"
PLATFORM=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
"$PY" -m pip download --quiet --no-deps --dest "$DEST" --only-binary=:all: --python-version "$PYVER" \
  --implementation cp "${PLATFORM[@]}" "${WHEELS[@]}"
ls -1 "$DEST"
