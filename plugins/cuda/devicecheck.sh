#!/usr/bin/env bash
# The CUDA lane's check on a real GPU (NVIDIA H100/H200, CUDA 13, PyTorch with
# its nvidia-* CUDA 13 libraries, sentence-transformers and onnxruntime's CPU
# build installed; no package registry). Run from the repository root:
#
#   bash plugins/cuda/devicecheck.sh [PARTS_DIR]
#
# PARTS_DIR (default: wheelparts) holds onnxruntime-gpu's wheel in parts, as
# plugins/cuda/split-wheel.sh makes them, with its .sha256. Steps, within 10
# minutes: reassemble and install the wheel in place of the CPU build; point
# it at the CUDA and cuDNN libraries of PyTorch's environment; run the CUDA
# lane's tests on the GPU (every family's tiny reference, fp32 and fp16, the
# conformance kit, the fault and lock tests); run benchmarks/cuda.py. Results
# go to $OUT (default: devicecheck-out): summary.json, tests.xml,
# tests.log, bench.json, bench.log.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
parts=${1:-wheelparts}
out=${OUT:-$root/devicecheck-out}
py=${PYTHON:-python3}
mkdir -p "$out"
started=$(date +%s)
summary="$out/summary.json"

note() { printf '[devicecheck %3ss] %s\n' "$(($(date +%s) - started))" "$*"; }
finish() {
    local status=$1 step=$2
    printf '{"status": "%s", "step": "%s", "seconds": %s}\n' \
        "$status" "$step" "$(($(date +%s) - started))" >"$summary"
    note "$status at $step"
}
trap 'finish failed "${step:-start}"' ERR

step=gpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"

step=reassemble
sums=("$parts"/*.whl.sha256)
[ -f "${sums[0]}" ] || { echo "no wheel parts (*.whl.sha256) in $parts" >&2; false; }
wheel_name=$(basename "${sums[0]}" .sha256)
sum_file="$(cd "$(dirname "${sums[0]}")" && pwd)/$(basename "${sums[0]}")"
work=$(mktemp -d)
cat "$parts/$wheel_name".part-* >"$work/$wheel_name"
(cd "$work" && sha256sum --check "$sum_file")
note "reassembled $wheel_name"

step=install
"$py" -m pip uninstall -y onnxruntime onnxruntime-gpu >/dev/null 2>&1 || true
# Its dependencies (numpy, protobuf, flatbuffers, sympy, ...) came with the CPU build.
"$py" -m pip install --no-index --no-deps "$work/$wheel_name"
# Synapse itself, from this checkout, on what is installed (no registry here).
"$py" -m pip install --no-index --no-deps --no-build-isolation -q \
    -e . -e ./plugins/models -e ./plugins/cpu -e ./plugins/cuda
if [ -d wheelhouse ]; then  # what the image lacks, carried as wheels (pip download -d wheelhouse)
    "$py" -m pip install --no-index --find-links wheelhouse -q -r requirements/run.txt \
        pytest trio hypothesis || true
fi

step=libraries
# The CUDA and cuDNN libraries of PyTorch's nvidia-* packages, for onnxruntime
# in this process and in every worker it starts (LD_LIBRARY_PATH is inherited).
nvidia_libs=$("$py" - <<'PY'
import glob, os, site
dirs = []
for base in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib")))
print(":".join(dirs))
PY
)
export LD_LIBRARY_PATH="${nvidia_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$py" - <<'PY'
import onnxruntime as ort
print("onnxruntime", ort.__version__, ort.get_available_providers())
assert "CUDAExecutionProvider" in ort.get_available_providers(), "no CUDAExecutionProvider"
PY
synapse plugins | tee "$out/plugins.txt"

step=tests
export SYNAPSE_CUDA_TEST_DEVICE=nvidia
timeout 270 "$py" -m pytest -q -p no:xdist -p no:cacheprovider plugins/cuda/tests \
    --junitxml="$out/tests.xml" 2>&1 | tee "$out/tests.log"
test "${PIPESTATUS[0]}" -eq 0
unset SYNAPSE_CUDA_TEST_DEVICE

step=benchmark
timeout 270 "$py" -m benchmarks.cuda --out "$out/bench.json" 2>&1 | tee "$out/bench.log"
test "${PIPESTATUS[0]}" -eq 0

trap - ERR
finish passed done
