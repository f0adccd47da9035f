#!/usr/bin/env bash
# The GPU proof, for a lent H100/H200; run from the repository root:
#   OUT=/some/dir bash .ci/gpu.sh
# Builds for sm_90 (Release, Ninja) in build/gpu, runs the whole CTest suite with the CUDA tests
# live, kf-bench, then compute-sanitizer memcheck over every CUDA test binary (and racecheck over
# the op tests): the benchmark comes before the slow sanitizer runs so that a run cut off by a
# time limit still has its numbers. Logs go to $OUT (default build/gpu/out):
#   gpu.txt  build.log  ctest.log  sanitizer.log  bench.log  bench.json  summary.txt
# Every step runs even when an earlier one failed (a failed build stops only what needs it);
# the exit status is non-zero if any step failed. Aimed at < 8 minutes on an H100.
set -uo pipefail  # no -e: each step's status is recorded and the next step still runs
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=${OUT:-$PWD/build/gpu/out}
BUILD=build/gpu
JOBS=${JOBS:-16}
BENCH_ARGS=${KF_BENCH_ARGS:-}  # extra kf-bench options, e.g. "--all-acts --dtypes f32,f16,bf16,f64"
mkdir -p "$OUT"
[[ -d /usr/local/cuda/bin ]] && export PATH="$PATH:/usr/local/cuda/bin"

STEPS=()
FAILED=0
section() { printf '\n==================== %s ====================\n' "$*"; }
record() {  # record NAME RC [NOTE]
  STEPS+=("$(printf '%-30s %s %s' "$1" "$([[ $2 == 0 ]] && echo ok || echo "FAILED (exit $2)")" "${3:-}")")
  [[ $2 == 0 ]] || FAILED=1
}

section "GPU"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --format=csv --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,\
temperature.gpu,power.draw,power.limit 2>&1
  nvcc --version 2>&1 | tail -n 2
  cmake --version | head -n 1
} | tee "$OUT/gpu.txt"

section "configure + build ($BUILD, sm_90, -j$JOBS)"
start=$SECONDS
# The lent machine has no GoogleTest package: a source tree carried in .deps/googletest is built.
GTEST_ARGS=()
[[ -f .deps/googletest/CMakeLists.txt ]] && GTEST_ARGS=(-DKF_GTEST_SOURCE_DIR="$PWD/.deps/googletest")
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKF_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  "${GTEST_ARGS[@]}" -DKF_BUILD_DOCS=OFF >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$JOBS" >>"$OUT/build.log" 2>&1
build_rc=$?
tail -n 25 "$OUT/build.log"
record "build" $build_rc "($((SECONDS - start))s)"

if [[ -f $BUILD/CTestTestfile.cmake ]]; then
  section "ctest (whole suite, CUDA live)"
  start=$SECONDS
  (cd "$BUILD" && ctest -j "$JOBS" --output-on-failure --timeout 300) 2>&1 | tee "$OUT/ctest.log"
  ctest_rc=$?
  record "ctest" $ctest_rc "($((SECONDS - start))s): $(grep -E 'tests passed' "$OUT/ctest.log" | tail -n 1)"
else
  record "ctest" 1 "(not run: the build produced no test list)"
fi

section "kf-bench"
start=$SECONDS
if [[ -x $BUILD/bench/kf-bench ]]; then
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
  "$BUILD/bench/kf-bench" --cuda --json "$OUT/bench.json" $BENCH_ARGS 2>&1 | tee "$OUT/bench.log"
  bench_rc=$?
  record "kf-bench" $bench_rc "($((SECONDS - start))s)"
else
  record "kf-bench" 1 "(not built)"
fi

section "compute-sanitizer"
start=$SECONDS
SANITIZER=$(command -v compute-sanitizer || true)
: >"$OUT/sanitizer.log"
SANITIZER_LINES=()
SANITIZER_RUN=$(mktemp)
sanitize() {  # sanitize TOOL BINARY [ARGS...]: one run, its error count into SANITIZER_LINES
  local tool=$1 bin=$2 rc errors
  shift 2
  echo "---- $tool: $bin $*" | tee -a "$OUT/sanitizer.log"
  # API errors are not counted: the tests provoke some on purpose (out of memory, bad device),
  # and the library turns every failing CUDA call into a kf error the tests check.
  timeout 300 "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 100 --report-api-errors no \
    "$bin" "$@" >"$SANITIZER_RUN" 2>&1
  rc=$?
  cat "$SANITIZER_RUN" >>"$OUT/sanitizer.log"
  # memcheck ends with "ERROR SUMMARY: N errors", racecheck with "RACECHECK SUMMARY: ... (N errors, ...)".
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+|\([0-9]+ errors' "$SANITIZER_RUN" | tail -n 1 | grep -oE '[0-9]+')
  grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$SANITIZER_RUN" | tail -n 1
  SANITIZER_LINES+=("$(printf '  %-10s %-48s %s errors, exit %s' "$tool" "${bin#"$BUILD"/} $*" "${errors:-?}" "$rc")")
  return $rc
}
if [[ -z $SANITIZER ]]; then
  record "compute-sanitizer" 1 "(compute-sanitizer not found)"
elif ((build_rc != 0)); then
  record "compute-sanitizer" 1 "(not run: the build failed)"
else
  sanitizer_rc=0
  mapfile -t cuda_tests < <(find "$BUILD/tests" -type f -perm -u+x -name '*_cuda' | sort)
  for bin in "${cuda_tests[@]}"; do
    sanitize memcheck "$bin" || sanitizer_rc=1
  done
  # kf-bench's smoke run: odd shapes, bias broadcast, every float dtype, on the GPU.
  [[ -x $BUILD/bench/kf-bench ]] && { sanitize memcheck "$BUILD/bench/kf-bench" --quick --cuda || sanitizer_rc=1; }
  # racecheck (shared-memory hazards) on the op tests only, to keep the run short.
  for bin in "${cuda_tests[@]}"; do
    [[ $bin == */ops/* ]] && { sanitize racecheck "$bin" || sanitizer_rc=1; }
  done
  record "compute-sanitizer" $sanitizer_rc "($((SECONDS - start))s, ${#cuda_tests[@]} CUDA test binaries)"
fi

section "summary"
{
  echo "kf-bench:"
  sed -n '/^kf-bench:/,$p' "$OUT/bench.log" 2>/dev/null
  echo
  echo "gpu: $(grep -m 1 '^NVIDIA' "$OUT/gpu.txt" || echo 'unknown (nvidia-smi gave no card)')"
  echo "compute-sanitizer:"
  printf '%s\n' "${SANITIZER_LINES[@]}"
  echo "ctest:"
  [[ -f $OUT/ctest.log ]] &&
    awk -f .ci/ctest_summary.awk "$OUT/ctest.log"
  echo "steps:"
  printf '%s\n' "${STEPS[@]}"
  echo "total ${SECONDS}s"
} | tee "$OUT/summary.txt"
rm -f "$SANITIZER_RUN"
exit $FAILED
