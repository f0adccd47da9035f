#!/usr/bin/env bash
# The GPU proof, for a lent H100/H200; run from the repository root:
#   OUT=/some/dir bash .ci/gpu.sh
# Builds for sm_90 (Release, Ninja) in build/gpu; runs kf-bench --suite all alone on the GPU;
# then the whole CTest suite with the CUDA tests live while compute-sanitizer runs beside it
# (memcheck over every CUDA test binary and kf-bench --quick, racecheck over the op tests;
# SAN_JOBS runs at once, default 10, or JOBS without ctest beside them). The benchmark comes
# first so that a run cut off by a time limit still has its numbers. Logs go to $OUT (default build/gpu/out):
#   gpu.txt  build.log  bench.log  bench.json  ctest.log  sanitizer.log  summary.txt
#   (and ctest_verbose.log, the tests' own output, when a test failed)
# Every step runs even when an earlier one failed (a failed build stops only what needs it);
# the exit status is non-zero if any step failed. Made for one 10-minute call on a lent
# H100/H200 with 16 cores, the build included; since 2026-12-02 the whole takes longer than that
# there (ctest ended at 538 s, 12 sanitizer runs still due), hence KF_GPU_STEPS below. Until the
# last step rewrites it, summary.txt gathers each step's line and each sanitizer run's line as
# they end, and ctest.log grows as the tests end: a run cut off by the call's limit still shows
# how far it got and what it took.
# KF_GPU_STEPS (a comma list of bench, ctest and sanitizer; default all three) runs only some
# steps after the build, for a proof in two calls where one call is too short; the summary then
# says "partial". On an H200 (2026-12-02 08:00Z), on one warm machine: KF_GPU_STEPS=bench,ctest
# 356 s (build 102, kf-bench 146, ctest alone 108), then KF_GPU_STEPS=sanitizer 377 s (47 runs,
# 5014 process-seconds, 16 at once). On an H100 (2026-12-06 07:29Z), on one warm machine:
# KF_GPU_STEPS=bench,ctest 288 s, then KF_GPU_STEPS=sanitizer with KF_GPU_SAN_PART=0/2 229 s and
# 1/2 233 s (64 runs in all; the whole step had taken 562 s there at 05:55Z).
# KF_GPU_SAN_PART=I/N runs only the sanitizer runs whose place in the list is I modulo N, for a
# sanitizer step split over N calls. KF_GPU_SAN_ONLY=REGEX runs only those whose binary's path
# matches REGEX (bash =~), for a change confined to the code those binaries test (e.g. softmax);
# the summary then says "partial" and names it. A warm machine keeps build/gpu between calls, so
# a later call's build is only a check.
set -uo pipefail  # no -e: each step's status is recorded and the next step still runs
cd "$(dirname "${BASH_SOURCE[0]}")/.."

OUT=${OUT:-$PWD/build/gpu/out}
BUILD=${KF_GPU_BUILD:-build/gpu}  # another build directory only for trying the script itself
JOBS=${JOBS:-16}
BENCH_ARGS=${KF_BENCH_ARGS:-}  # extra kf-bench options, e.g. "--all-acts --dtypes f32,f16,bf16,f64"
WANTED=${KF_GPU_STEPS:-bench,ctest,sanitizer}
for step in ${WANTED//,/ }; do
  case $step in
    bench | ctest | sanitizer) ;;
    *) echo "gpu.sh: KF_GPU_STEPS names '$step'; the steps are bench, ctest and sanitizer" >&2; exit 2 ;;
  esac
done
want() { [[ ",$WANTED," == *",$1,"* ]]; }
PARTIAL=
want bench && want ctest && want sanitizer || PARTIAL="partial proof: KF_GPU_STEPS=$WANTED"
SAN_PART=${KF_GPU_SAN_PART:-0/1}
if [[ ! $SAN_PART =~ ^([0-9]+)/([1-9][0-9]*)$ ]] || ((BASH_REMATCH[1] >= BASH_REMATCH[2])); then
  echo "gpu.sh: KF_GPU_SAN_PART is '$SAN_PART'; it reads I/N with 0 <= I < N" >&2
  exit 2
fi
SAN_I=${BASH_REMATCH[1]} SAN_N=${BASH_REMATCH[2]}
((SAN_N > 1)) && PARTIAL="partial proof: KF_GPU_STEPS=$WANTED, KF_GPU_SAN_PART=$SAN_PART"
SAN_ONLY=${KF_GPU_SAN_ONLY:-}
[[ -n $SAN_ONLY ]] && PARTIAL="partial proof: KF_GPU_STEPS=$WANTED, KF_GPU_SAN_PART=$SAN_PART, KF_GPU_SAN_ONLY=$SAN_ONLY"
mkdir -p "$OUT"
# Nothing of an earlier run may pass for this one's: the logs, the test counts and the sanitizer
# results are cleared first, and the summary says "incomplete" until the last step rewrites it.
rm -f "$OUT"/{gpu.txt,build.log,bench.log,bench.json,ctest.log,ctest_verbose.log,sanitizer.log} \
  "$BUILD"/{cuda_tests.txt,ctest_verbose.log}
echo "started $(date -u +%Y-%m-%dT%H:%M:%SZ), incomplete: the run ended before its summary" \
  "${PARTIAL:+($PARTIAL)}" >"$OUT/summary.txt"
[[ -d /usr/local/cuda/bin ]] && export PATH="$PATH:/usr/local/cuda/bin"

STEPS=()
FAILED=0
section() { printf '\n==================== %s ====================\n' "$*"; }
record() {  # record NAME RC [NOTE]; the line goes to the summary at once, for a run cut off
  STEPS+=("$(printf '%-30s %s %s' "$1" "$([[ $2 == 0 ]] && echo ok || echo "FAILED (exit $2)")" "${3:-}")")
  echo "${STEPS[-1]} (at ${SECONDS}s)" >>"$OUT/summary.txt"
  [[ $2 == 0 ]] || FAILED=1
}
skipped() {  # skipped NAME: a step that KF_GPU_STEPS leaves out (neither ok nor failed)
  STEPS+=("$(printf '%-30s %s' "$1" "not run (KF_GPU_STEPS=$WANTED)")")
  echo "${STEPS[-1]}" >>"$OUT/summary.txt"
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
  -DKF_CUDA_TESTS_PER_BINARY=ON "${GTEST_ARGS[@]}" -DKF_BUILD_DOCS=OFF >"$OUT/build.log" 2>&1 &&
  cmake --build "$BUILD" -j "$JOBS" >>"$OUT/build.log" 2>&1
build_rc=$?
tail -n 25 "$OUT/build.log"
record "build" $build_rc "($((SECONDS - start))s)"

section "kf-bench (--suite all; alone on the GPU)"
start=$SECONDS
if ! want bench; then
  skipped "kf-bench"
elif ((build_rc == 0)) && [[ -x $BUILD/bench/kf-bench ]]; then
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
  "$BUILD/bench/kf-bench" --cuda --suite all --json "$OUT/bench.json" $BENCH_ARGS 2>&1 | tee "$OUT/bench.log"
  bench_rc=$?
  record "kf-bench" $bench_rc "($((SECONDS - start))s)"
else
  record "kf-bench" 1 "(not run: the build failed)"
fi

# compute-sanitizer runs (one process each, mostly host-bound) go in the background while ctest
# runs: neither is timed. Each run's output and exit status land in $SAN_DIR, named by its
# position in the list; the step's lines are printed once ctest is done.
SANITIZER=$(command -v compute-sanitizer || true)
SAN_JOBS=${SAN_JOBS:-$(want ctest && echo 10 || echo "$JOBS")}
SAN_DIR=$BUILD/sanitizer
selected() {  # selected I: whether this call runs san_runs[I] (KF_GPU_SAN_PART, KF_GPU_SAN_ONLY)
  local shard tool bin
  read -r shard tool bin _ <<<"${san_runs[$1]}"
  ((${1} % SAN_N == SAN_I)) && [[ -z $SAN_ONLY || $bin =~ $SAN_ONLY ]]
}
: >"$OUT/sanitizer.log"
san_runs=()
san_pid=
if want sanitizer && [[ -n $SANITIZER ]] && ((build_rc == 0)); then
  rm -rf "$SAN_DIR" && mkdir -p "$SAN_DIR"
  mapfile -t cuda_tests < <(find "$BUILD/tests" -type f -perm -u+x -name '*_cuda' | sort)
  # One entry per run: SHARD/SHARDS TOOL BINARY [ARGS...] (a GoogleTest shard; - for the whole
  # binary). The longest runs go first, so that none starts late and ends the step: memcheck over
  # the row kernels' tests, then racecheck (shared-memory hazards) over the op tests, then the
  # other memcheck runs. The row kernels' tests run in shards (172 s and 96 s of memcheck at
  # 2026-11-30 12:21Z unsharded): norm_test_cuda in 8 for memcheck and 16 for racecheck,
  # softmax_test_cuda in 4 and 12. With 16 runs at once (2026-12-04 04:33Z, H200) the norm tests'
  # four memcheck shards took 343-405 s and their eight racecheck shards 198-420 s, one of them
  # killed by the 420 s limit with 12 of its 14 tests passed; the softmax racecheck shards took
  # 74-377 s.
  row_tests() { [[ $1 == */ops/norm_* || $1 == */ops/softmax_* ]]; }
  shards() { # TOOL BINARY: how many shards that run takes
    case $1/${2##*/} in
      memcheck/norm_*) echo 8 ;; racecheck/norm_*) echo 16 ;;
      memcheck/softmax_*) echo 4 ;; racecheck/softmax_*) echo 12 ;;
    esac
  }
  for tool in memcheck racecheck; do
    for bin in "${cuda_tests[@]}"; do
      row_tests "$bin" || continue
      n=$(shards "$tool" "$bin")
      for ((shard = 0; shard < n; shard++)); do san_runs+=("$shard/$n $tool $bin"); done
    done
  done
  for bin in "${cuda_tests[@]}"; do
    [[ $bin == */ops/* ]] && ! row_tests "$bin" && san_runs+=("- racecheck $bin")
  done
  for bin in "${cuda_tests[@]}"; do row_tests "$bin" || san_runs+=("- memcheck $bin"); done
  # kf-bench's smoke run: odd shapes, bias broadcast, every float dtype, on the GPU.
  [[ -x $BUILD/bench/kf-bench ]] && san_runs+=("- memcheck $BUILD/bench/kf-bench --quick --cuda")
  # API errors are not counted: the tests provoke some on purpose (out of memory, bad device),
  # and the library turns every failing CUDA call into a kf error the tests check. Tests named
  # *Huge* (tens of GB of device memory, e.g. Dropout.HugeTensorIndexedIn64Bits) run in ctest
  # only: under the sanitizer they would take the step's time and, ten at once, the memory.
  for i in "${!san_runs[@]}"; do
    selected "$i" && printf '%s %s\n' "$i" "${san_runs[$i]}"
  done |
    GTEST_FILTER='-*Huge*' SANITIZER=$SANITIZER SAN_DIR=$SAN_DIR OUT=$OUT xargs -P "$SAN_JOBS" -L 1 bash -c '
      i=$1 shard=$2 tool=$3 bin=$4; shift 4
      if [[ $shard != - ]]; then
        export GTEST_SHARD_INDEX=${shard%/*} GTEST_TOTAL_SHARDS=${shard#*/}
      fi
      timeout 420 "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 100 \
        --report-api-errors no "$bin" "$@" >"$SAN_DIR/$i.log" 2>&1
      rc=$?
      echo $rc >"$SAN_DIR/$i.rc"
      echo $SECONDS >"$SAN_DIR/$i.s"
      echo "  sanitizer run $i ($tool ${bin##*/} $* shard $shard) ended: exit $rc, ${SECONDS}s" \
        >>"$OUT/summary.txt"' _ &
  san_pid=$!
  san_start=$SECONDS
fi

if ! want ctest; then
  skipped "ctest"
elif ((build_rc == 0)) && [[ -f $BUILD/CTestTestfile.cmake ]]; then
  section "ctest (whole suite, CUDA live)"
  start=$SECONDS
  # The CPU tests run one CTest test per test case; each CUDA test binary is one CTest test
  # (KF_CUDA_TESTS_PER_BINARY, --gtest_brief), or several, NAME.IofN, each a GoogleTest shard;
  # the GoogleTest counts are read from the verbose log and summed over a binary's shards.
  # ctest.log (the verbose log less the tests' own lines) is written as the tests end.
  (cd "$BUILD" && ctest -j "$JOBS" -V --timeout 400) 2>&1 | tee "$BUILD/ctest_verbose.log" |
    grep --line-buffered -vE '^[0-9]+: ' >"$OUT/ctest.log"
  ctest_rc=${PIPESTATUS[0]}
  cat "$OUT/ctest.log"
  ((ctest_rc == 0)) || cp "$BUILD/ctest_verbose.log" "$OUT/ctest_verbose.log"  # the failures' output
  awk '/^ *Start +[0-9]+: / { id = $2; sub(":", "", id); t = $3; sub(/\.[0-9]+of[0-9]+$/, "", t); name[id] = t }
       /^[0-9]+: \[  (PASSED|SKIPPED|FAILED)  ?\] [0-9]+ tests?[.,]/ {
         id = $1; sub(":", "", id); t = name[id]; kind = tolower($3)
         if (t ~ /_cuda$/) { if (!((t, kind) in n)) order[t] = order[t] " " kind; n[t, kind] += $5 } }
       END { for (t in order) { c = ""; k = split(order[t], kinds, " ")
               for (j = 1; j <= k; j++) c = c sprintf(" %d %s,", n[t, kinds[j]], kinds[j])
               sub(/,$/, "", c); printf "  %-28s%s\n", t, c } }' \
    "$BUILD/ctest_verbose.log" | sort >"$BUILD/cuda_tests.txt"
  # The Python frontend's pytest runs: their summary lines ("N passed, M skipped in T s").
  awk '/^ *Start +[0-9]+: python_frontend_/ { id = $2; sub(":", "", id); name[id] = $3 }
       { id = $1; sub(":", "", id) }
       (id in name) && / (passed|failed|error)/ && / in [0-9.]+s/ {
         line = $0; sub(/^[0-9]+: /, "", line); gsub(/=/, "", line); sub(/^ +/, "", line)
         printf "  %-28s %s\n", name[id], line }' "$BUILD/ctest_verbose.log" |
    sort >>"$BUILD/cuda_tests.txt"
  cat "$BUILD/cuda_tests.txt"
  record "ctest" $ctest_rc "($((SECONDS - start))s): $(grep -E 'tests passed' "$OUT/ctest.log" | tail -n 1)"
else
  record "ctest" 1 "(not run: the build failed)"
fi

section "compute-sanitizer"
SANITIZER_LINES=()
if ! want sanitizer; then
  skipped "compute-sanitizer"
elif [[ -z $SANITIZER ]]; then
  record "compute-sanitizer" 1 "(compute-sanitizer not found)"
elif ((build_rc != 0)); then
  record "compute-sanitizer" 1 "(not run: the build failed)"
else
  wait "$san_pid"
  sanitizer_rc=0
  san_count=0
  for i in "${!san_runs[@]}"; do
    selected "$i" || continue
    san_count=$((san_count + 1))
    read -r shard tool bin args <<<"${san_runs[$i]}"
    what="${bin#"$BUILD"/}${args:+ $args}"
    [[ $shard != - ]] && what+=" (shard $shard)"
    rc=$(cat "$SAN_DIR/$i.rc" 2>/dev/null || echo "?")
    took=$(cat "$SAN_DIR/$i.s" 2>/dev/null || echo "?")
    { echo "---- $tool: $what"; cat "$SAN_DIR/$i.log" 2>/dev/null; } >>"$OUT/sanitizer.log"
    # memcheck ends with "ERROR SUMMARY: N errors", racecheck with "RACECHECK SUMMARY: ... (N errors, ...)".
    errors=$(grep -oE 'ERROR SUMMARY: [0-9]+|\([0-9]+ errors' "$SAN_DIR/$i.log" 2>/dev/null | tail -n 1 | grep -oE '[0-9]+')
    SANITIZER_LINES+=("$(printf '  %-10s %-56s %s errors, exit %s, %ss' "$tool" "$what" "${errors:-?}" "$rc" "$took")")
    [[ $rc == 0 && ${errors:-x} == 0 ]] || sanitizer_rc=1
  done
  printf '%s\n' "${SANITIZER_LINES[@]}"
  record "compute-sanitizer" $sanitizer_rc "($((SECONDS - san_start))s$(want ctest && echo " beside ctest"), $san_count of ${#san_runs[@]} runs over ${#cuda_tests[@]} CUDA test binaries and kf-bench, $SAN_JOBS at once)"
fi

section "summary"
{
  [[ -n $PARTIAL ]] && echo "$PARTIAL: what this call left out is in the other calls' summaries"
  echo "kf-bench:"
  sed -n '/^kf-bench:/,$p' "$OUT/bench.log" 2>/dev/null
  echo
  echo "gpu: $(grep -m 1 '^NVIDIA' "$OUT/gpu.txt" || echo 'unknown (nvidia-smi gave no card)')"
  echo "compute-sanitizer:"
  printf '%s\n' "${SANITIZER_LINES[@]}"
  echo "ctest:"
  [[ -f $OUT/ctest.log ]] &&
    awk -f .ci/ctest_summary.awk "$OUT/ctest.log"
  echo "CUDA test binaries (GoogleTest counts):"
  cat "$BUILD/cuda_tests.txt" 2>/dev/null
  echo "steps:"
  printf '%s\n' "${STEPS[@]}"
  echo "total ${SECONDS}s"
} | tee "$OUT/summary.txt"
exit $FAILED
