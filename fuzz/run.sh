#!/usr/bin/env bash
# make fuzz: writes the seed corpora, replays fuzz/regressions/<target>/, then runs each
# libFuzzer target for FUZZ_SECONDS (default 60) on one core, FUZZ_JOBS targets at a time
# (default 1; make fuzz runs one per core). Exit 1 if any target found a crash, a leak, a timeout
# or an out-of-memory; the inputs are under BUILD/fuzz/artifacts/.
#   bash fuzz/run.sh [BUILD_DIR]      FUZZ_SECONDS=600 FUZZ_TARGETS="onnx plan" bash fuzz/run.sh
# Extra libFuzzer flags go in FUZZ_FLAGS (e.g. FUZZ_FLAGS=-runs=1000000).
# MEMPLAN_FUZZ_STRICT=1 also counts "internal error" exceptions as findings (fuzz_common.h).
set -uo pipefail
src=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-build-fuzz}" && pwd)
work=$build/fuzz
seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-1}
targets=${FUZZ_TARGETS:-onnx plan document cli}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

"$work/make_seeds" "$work/seeds" > /dev/null || exit 1
# Real exports as ONNX seeds too (the graph files only: weights are external data). Small ones
# only: libFuzzer's input length follows the largest seed, and a large one slows every run.
models=${MEMPLAN_MODEL_CACHE:-}
if [ -n "$models" ] && [ -d "$models" ]; then
  find "$models" -maxdepth 1 -name '*.onnx' -size -200k -exec cp {} "$work/seeds/onnx/" \;
  echo "fuzz: onnx seeds include $(find "$models" -maxdepth 1 -name '*.onnx' -size -200k | wc -l) exported models from $models"
fi

dict_of() {
  case $1 in
    onnx) echo "$src/onnx.dict" ;;
    plan | document) echo "$src/json.dict" ;;
    cli) echo "$src/cli.dict" ;;
  esac
}

# One target: libFuzzer's output in fuzz_T.log, its exit status in fuzz_T.rc.
fuzz_one() {
  local t=$1
  local corpus=$work/corpus/$t artifacts=$work/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  local regressions=()
  if compgen -G "$src/regressions/$t/*" > /dev/null; then regressions=("$src/regressions/$t"); fi
  # Inputs are read from every directory; new ones are written to the first.
  "$work/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -dict="$(dict_of "$t")" -artifact_prefix="$artifacts/" -close_fd_mask=1 -print_final_stats=1 \
    ${FUZZ_FLAGS:-} "$corpus" "$work/seeds/$t" "${regressions[@]}" > "$work/fuzz_$t.log" 2>&1
  echo $? > "$work/fuzz_$t.rc"
}

for t in $targets; do
  echo "fuzz: $t for ${seconds}s (log $work/fuzz_$t.log)"
  rm -f "$work/fuzz_$t.rc"
  fuzz_one "$t" &
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done
wait

failed=()
for t in $targets; do
  log=$work/fuzz_$t.log
  rc=$(cat "$work/fuzz_$t.rc" 2> /dev/null || echo 1)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz: $t: ${runs:-?} executions, exit $rc, corpus $(ls "$work/corpus/$t" | wc -l) inputs"
  if [ "$rc" -ne 0 ]; then
    failed+=("$t")
    grep -E -A30 "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|internal error" "$log" | head -60
    ls -l "$work/artifacts/$t"
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (reproduce: $work/fuzz_TARGET $work/artifacts/TARGET/crash-...)"
  exit 1
fi
echo "fuzz: every target ran ${seconds}s without a finding"
