#!/usr/bin/env bash
# Builds and runs bench/cpu/bandwidth.c (the machine's memory read bandwidth, median of REPS
# passes over SIZE MiB with THREADS threads), in the build root where the host needs it.
#   bench/cpu/bandwidth.sh [SIZE_MIB=4096] [THREADS=2] [REPS=7]
set -euo pipefail
HERE=$(CDPATH= cd -P "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$(dirname "$HERE")")
TC=("$REPO/scripts/toolchain.sh" run)
"$REPO/scripts/toolchain.sh" needed || TC=()
CC=${CC:-$([ ${#TC[@]} -gt 0 ] && echo /usr/libexec/swift/bin/clang || echo cc)}
mkdir -p "$REPO/bench/out"
"${TC[@]}" "$CC" -O2 -mavx2 -pthread "$HERE/bandwidth.c" -o "$REPO/bench/out/bandwidth"
"${TC[@]}" "$REPO/bench/out/bandwidth" "${1:-4096}" "${2:-2}" "${3:-7}"
