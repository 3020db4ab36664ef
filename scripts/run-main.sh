#!/usr/bin/env bash
# Installs what is missing, builds the release preset and runs the main job: the workloads
# a / b / c of the hash-table example when they are built, the quick-start example otherwise.
# Arguments are passed to the workload program; without any, it runs --reps 5 (each
# configuration five times, interleaved, medians in the tables: one run of each on a shared
# machine can put the log modes in any order).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

scripts/setup-debian.sh

cmake --preset release
cmake --build --preset release -j"$(nproc)"

workloads=build/release/examples/hashtable/tlptm-workloads
quickstart=build/release/examples/quickstart
if [ -x "$workloads" ]; then
    if [ "$#" -eq 0 ]; then
        set -- --reps 5
    fi
    exec "$workloads" "$@"
elif [ -x "$quickstart" ]; then
    exec "$quickstart"
else
    echo "run-main.sh: neither $workloads nor $quickstart was built" >&2
    exit 1
fi
