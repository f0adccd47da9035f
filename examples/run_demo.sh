#!/usr/bin/env bash
# The demo command (README: `bash examples/run_demo.sh`): builds, in Release, only the library,
# kf-demo, kf-fusion-demo and kf-bench (build/demo), then runs the demos (on the GPU if present,
# else the CPU) and a short kf-bench run (add + ReLU and add + GELU, plain and with a bias row).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${KF_DEMO_BUILD_DIR:-build/demo}
args=(-DCMAKE_BUILD_TYPE=Release -DKF_BUILD_TESTS=OFF -DKF_BUILD_DOCS=OFF -DKF_BUILD_BENCH=ON -DKF_BUILD_EXAMPLES=ON)
if [[ ! -f $BUILD/CMakeCache.txt ]]; then  # first configure only: these cannot change later
  command -v ninja >/dev/null && args+=(-G Ninja)
  nvcc=$(command -v nvcc || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; } || true)
  if [[ -n $nvcc ]]; then
    args+=(-DCMAKE_CUDA_COMPILER="$nvcc")
    # With a GPU here, compile for it alone (faster); otherwise for the default architectures.
    nvidia-smi -L >/dev/null 2>&1 && args+=(-DCMAKE_CUDA_ARCHITECTURES=native)
  fi
fi
cmake -S . -B "$BUILD" "${args[@]}" >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target kf-demo kf-fusion-demo kf-bench

echo
echo "==== demo ===="
"$BUILD/examples/kf-demo"
echo
echo "==== fusion demo (docs/fusion.md) ===="
"$BUILD/examples/kf-fusion-demo"
echo
echo "==== kf-bench (short run; see kf-bench --help for the full set) ===="
"$BUILD/bench/kf-bench" --ops add --acts relu,gelu
