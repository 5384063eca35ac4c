#!/usr/bin/env bash
# Split a wheel (onnxruntime-gpu's is about 255 MB) into parts under 64 MiB,
# for a transfer that carries at most 64 MiB at a time, with its sha256 beside
# them; plugins/cuda/devicecheck.sh reassembles and checks them.
#
#   bash plugins/cuda/split-wheel.sh WHEEL [OUT_DIR]     # OUT_DIR default: wheelparts
set -euo pipefail

if [ "$#" -lt 1 ] || [ ! -f "$1" ]; then
    echo "usage: $0 WHEEL [OUT_DIR]" >&2
    exit 2
fi
wheel=$1
out=${2:-wheelparts}
name=$(basename "$wheel")
mkdir -p "$out"
rm -f "$out/$name".part-*
# 60 MiB parts: under the 64 MiB limit with room for what travels beside them
split --bytes=60M --numeric-suffixes=0 --suffix-length=2 "$wheel" "$out/$name.part-"
(cd "$(dirname "$wheel")" && sha256sum "$name") > "$out/$name.sha256"
ls -l "$out"
