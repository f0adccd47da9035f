#!/usr/bin/env bash
# The test command (README: `bash .ci/test.sh`), for a fresh Debian machine or a developer's:
#   0. installs the build tools that are missing (apt-get; nothing when all are there), and
#      NumPy and pytest for the Python frontend's tests (pip, else apt-get)
#   a. the main build in build/ci (CUDA on when nvcc exists: its tests report "skipped" without
#      a GPU) and the whole CTest suite
#   b. a CPU-only AddressSanitizer + UndefinedBehaviorSanitizer build in build/asan, running the
#      tests labelled cpu but not full_size (kf-bench at its CPU target's size: minutes there)
#   c. a CPU-only ThreadSanitizer build in build/tsan of the library and the tests that use it
#      from many threads (runtime, fusion graph/cache/concurrent launches), run under TSan
#   d. clang-format over the project's C/C++/CUDA sources, when .clang-format exists
# Every step runs even when an earlier one failed; the exit status is non-zero if any failed.
# Environment: JOBS (default: nproc); KF_FORMAT=strict|report: strict fails the run on
# formatting differences (the default), report only lists them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

JOBS=${JOBS:-$(nproc)}
KF_FORMAT=${KF_FORMAT:-strict}
export CCACHE_BASEDIR=$PWD  # cache hits across checkouts of the same tree
STEPS=()
FAILED=0
LAST_RC=0

section() { printf '\n==================== %s ====================\n' "$*"; }

# step NAME COMMAND...: runs the command, records NAME with its exit status, never aborts.
step() {
  local name=$1 rc=0 start=$SECONDS
  shift
  section "$name"
  "$@" || rc=$?
  local outcome="ok"
  [[ $rc == 0 ]] || outcome="FAILED (exit $rc)"
  STEPS+=("$(printf '%-34s %s  (%ds)' "$name" "$outcome" $((SECONDS - start)))")
  [[ $rc == 0 ]] || FAILED=1
  LAST_RC=$rc
  return 0
}

skip() { STEPS+=("$(printf '%-34s skipped: %s' "$1" "$2")"); }

install_missing_tools() {
  local wanted=(cmake ninja-build g++ libgtest-dev doxygen ccache pkg-config) missing=()
  [[ -f .clang-format ]] && wanted+=(clang-format)
  if ! command -v dpkg >/dev/null; then
    echo "not a Debian system: not installing anything; needs ${wanted[*]}"
    return 0
  fi
  local p
  for p in "${wanted[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    echo "all present: ${wanted[*]}"
    return 0
  fi
  local sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  echo "installing: ${missing[*]}"
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
}

# NumPy and pytest for the Python frontend's tests (frontends/python), into the python3 that the
# build's CMake is given: pip first, Debian's packages where pip is refused (an externally managed
# system Python) or missing.
install_python_modules() {
  if ! command -v python3 >/dev/null; then
    echo "no python3: the Python frontend's tests will report skipped"
    return 0
  fi
  if python3 -c 'import numpy, pytest' 2>/dev/null; then
    echo "present: numpy, pytest ($(python3 -c 'import numpy; print("numpy", numpy.__version__)'))"
    return 0
  fi
  python3 -m pip install --quiet numpy pytest && return 0
  if command -v dpkg >/dev/null; then
    local sudo=()
    [[ $(id -u) == 0 ]] || sudo=(sudo)
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3-numpy python3-pytest && python3 -c 'import numpy, pytest' 2>/dev/null && return 0
  fi
  # Not fatal: python_frontend_cpu then reports "skipped" (CTest lists it under "did not run").
  echo "WARNING: numpy and pytest could not be installed for $(command -v python3)"
  return 0
}

# The CUDA compiler, from PATH or the toolkit's usual place; empty when there is none.
find_nvcc() {
  command -v nvcc || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; } || true
}

main_configure() {
  local nvcc cuda_args
  nvcc=$(find_nvcc)
  if [[ -n $nvcc ]]; then
    cuda_args=(-DKF_ENABLE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc")
    echo "CUDA backend on ($nvcc)"
  else
    cuda_args=(-DKF_ENABLE_CUDA=OFF)
    echo "no nvcc: CPU-only build"
  fi
  local python=()
  command -v python3 >/dev/null && python=(-DPython3_EXECUTABLE="$(command -v python3)")
  cmake -S . -B build/ci -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" "${python[@]}"
}

main_build() { main_configure && cmake --build build/ci -j "$JOBS"; }

main_ctest() {
  (cd build/ci && ctest -j "$JOBS" --no-tests=error --output-on-failure --timeout 900) 2>&1 | tee build/ci/ctest.log
}

asan_build() {
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKF_ENABLE_CUDA=OFF -DKF_SANITIZE=ON \
    -DKF_BUILD_DOCS=OFF &&
    cmake --build build/asan -j "$JOBS"
}

asan_ctest() {
  (cd build/asan &&
    ASAN_OPTIONS=detect_leaks=1:check_initialization_order=1:strict_init_order=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest -L cpu -LE full_size -j "$JOBS" --no-tests=error --output-on-failure --timeout 900) 2>&1 | tee build/asan/ctest.log
}

# The binaries whose tests share contexts, caches, kernels and thread pools across threads.
TSAN_TARGETS=(runtime_test_cpu graph_test cache_test_cpu random_graph_test_cpu)
TSAN_TESTS='^(runtime_test_cpu|graph_test|cache_test_cpu)\.|^random_graph_test_cpu\..*Concurrent'

tsan_build() {
  cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKF_ENABLE_CUDA=OFF \
    -DKF_SANITIZE_THREAD=ON -DKF_BUILD_DOCS=OFF -DKF_BUILD_EXAMPLES=OFF -DKF_BUILD_BENCH=OFF &&
    cmake --build build/tsan -j "$JOBS" --target "${TSAN_TARGETS[@]}"
}

tsan_ctest() {
  (cd build/tsan &&
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
      ctest -R "$TSAN_TESTS" -j "$JOBS" --no-tests=error --output-on-failure --timeout 900) 2>&1 |
    tee build/tsan/ctest.log
}

format_check() {
  if [[ ! -f .clang-format ]]; then
    echo "no .clang-format: skipped"
    return 0
  fi
  local files=() rc=0
  mapfile -t files < <(find core include tests bench examples -type f \
    \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
  echo "$(clang-format --version | head -n1); ${#files[@]} files; mode $KF_FORMAT"
  clang-format --dry-run --Werror "${files[@]}" 2>build/clang-format.log || rc=$?
  if [[ $rc != 0 ]]; then
    echo "files clang-format would change (number of differences, file):"
    grep -oE '^[^: ]+:[0-9]+:[0-9]+: (error|warning)' build/clang-format.log | cut -d: -f1 | sort |
      uniq -c | sed 's/^/  /'
    echo "(details: build/clang-format.log; fix with clang-format -i)"
    [[ $KF_FORMAT == report ]] && { echo "report mode: not failing the run"; return 0; }
  fi
  return $rc
}

summary_lines() {  # the ctest summary of a log (with the lists of failed tests), or a note
  if [[ ! -f $1 ]]; then
    echo "  (no ctest log: $1)"
    return 0
  fi
  awk -f .ci/ctest_summary.awk "$1"
}

mkdir -p build
rm -f build/ci/ctest.log build/asan/ctest.log build/tsan/ctest.log  # never quote an earlier run
step "0. tools" install_missing_tools
step "0. python modules" install_python_modules
step "a. main build" main_build
if [[ $LAST_RC == 0 ]]; then step "a. main ctest" main_ctest; else skip "a. main ctest" "the build failed"; fi
step "b. asan+ubsan build (cpu)" asan_build
if [[ $LAST_RC == 0 ]]; then
  step "b. asan+ubsan ctest -L cpu" asan_ctest
else
  skip "b. asan+ubsan ctest -L cpu" "the build failed"
fi
step "c. tsan build (cpu, threaded tests)" tsan_build
if [[ $LAST_RC == 0 ]]; then
  step "c. tsan ctest (threaded tests)" tsan_ctest
else
  skip "c. tsan ctest (threaded tests)" "the build failed"
fi
step "d. clang-format" format_check

section "summary"
printf '%s\n' "${STEPS[@]}"
echo "main build, ctest:"
summary_lines build/ci/ctest.log
echo "asan build, ctest -L cpu:"
summary_lines build/asan/ctest.log
echo "tsan build, threaded tests:"
summary_lines build/tsan/ctest.log
command -v ccache >/dev/null && ccache -s 2>/dev/null | grep -iE 'hits|misses' | head -n 3 || true
echo "total ${SECONDS}s"
exit $FAILED
