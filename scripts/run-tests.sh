#!/usr/bin/env bash
# Installs what is missing, then builds and runs the test suite in three configurations:
#   release  every test, optimised build (including the packaging tests)
#   asan     every test but the packaging ones, under AddressSanitizer + UBSan
#   tsan     the tests labelled `concurrency`, under ThreadSanitizer
#   fuzz     short libFuzzer runs of the log decoder, the codec and recovery (clang)
# Every stage runs even if an earlier one failed; the exit status is non-zero if any failed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

scripts/setup-debian.sh

jobs="$(nproc)"
summary=()
failed=0

# run_stage <preset>: configure, build and test one preset; records a one-line summary.
run_stage() {
    local preset="$1" step start status=PASS cmd=()
    start=$SECONDS
    echo "==> [$preset] configure, build, test"
    for step in configure build test; do
        case "$step" in
        configure) cmd=(cmake --preset "$preset") ;;
        build) cmd=(cmake --build --preset "$preset" -j"$jobs") ;;
        test) cmd=(ctest --preset "$preset" -j2) ;;
        esac
        if ! "${cmd[@]}"; then
            status="FAIL ($step)"
            break
        fi
    done
    local line
    line="$(printf '%-8s %-16s %4ds' "$preset" "$status" $((SECONDS - start)))"
    echo "==> $line"
    summary+=("$line")
    [ "$status" = PASS ] || failed=1
}

run_stage release
run_stage asan
run_stage tsan
run_stage fuzz

echo
echo "==> summary"
printf '    %s\n' "${summary[@]}"
passed_stages=0
for line in "${summary[@]}"; do
    case "$line" in *PASS*) passed_stages=$((passed_stages + 1)) ;; esac
done
echo "stages: $passed_stages passed, $((${#summary[@]} - passed_stages)) failed"
if [ "$failed" -ne 0 ]; then
    echo "==> FAILED"
    exit 1
fi
echo "==> all stages passed"
