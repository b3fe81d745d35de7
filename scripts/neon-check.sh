#!/bin/sh
# neon-check.sh — the arm64 NEON kernels (swift/Sources/CKernels: dot_neon.c, f32_ops.c) built
# and checked against the scalar ones (swift/Tests/CKernelsCheck/isa_check.c). `make test`
# runs it (target test-neon), inside the build root on Linux hosts that use one.
#
# On x86-64: every CKernels source is compiled for aarch64 with clang (-Wall -Werror) three
# times — -march=armv8-a (dotprod enabled per function and chosen at run time),
# -march=armv8.2-a+dotprod, and -mcpu=apple-m1 (Apple's default arm64 CPU: the flags a Mac
# build gets) — linked statically against Debian's aarch64 cross libc and run under
# qemu-aarch64. On an arm64 machine (an Apple Silicon Mac, arm64 Linux) it builds and runs
# natively, and on an Intel Mac it checks the x86 tables natively instead. The cross tools come with the build root (scripts/provision-root.sh:
# libc6-dev-arm64-cross, libgcc-14-dev-arm64-cross, binutils-aarch64-linux-gnu, qemu-user);
# a host without them gets an error naming them, never a silent skip.
set -eu
cd "$(dirname "$0")/.."
SRC="swift/Sources/CKernels"
CHECK="swift/Tests/CKernelsCheck/isa_check.c"
OUT=${TMPDIR:-/tmp}/velo-neon-check.$$
mkdir -p "$OUT"
trap 'rm -rf "$OUT"' EXIT INT TERM

# clang: on PATH, or the Swift toolchain's (Debian's swiftlang keeps it in /usr/libexec/swift/bin)
CC=${NEON_CC:-}
if [ -z "$CC" ]; then
  for c in clang /usr/libexec/swift/bin/clang; do
    if command -v "$c" >/dev/null 2>&1; then CC=$c; break; fi
  done
fi
[ -n "$CC" ] || { echo "neon-check: no clang found (set NEON_CC)" >&2; exit 2; }

arch=$(uname -m)
if [ "$arch" = arm64 ] || [ "$arch" = aarch64 ] || [ "$(uname -s)" = Darwin ]; then
  # native: the compiler's default target (on an Apple Silicon Mac: apple-m1, dotprod built in)
  echo "neon-check: $CC, native ($(uname -s) $arch)"
  "$CC" -O2 -Wall -I"$SRC/include" -o "$OUT/isa_check" "$SRC"/*.c "$CHECK" -lm -lpthread
  "$OUT/isa_check"
  exit 0
fi

missing=""
[ -f /usr/aarch64-linux-gnu/include/stdio.h ] || missing="$missing libc6-dev-arm64-cross"
ls /usr/lib/gcc-cross/aarch64-linux-gnu/*/libgcc.a >/dev/null 2>&1 || missing="$missing libgcc-14-dev-arm64-cross"
command -v aarch64-linux-gnu-ld >/dev/null 2>&1 || missing="$missing binutils-aarch64-linux-gnu"
command -v qemu-aarch64 >/dev/null 2>&1 || missing="$missing qemu-user"
if [ -n "$missing" ]; then
  echo "neon-check: the aarch64 cross tools are missing:$missing" >&2
  echo "neon-check: install them (Debian: apt-get install$missing), or run make, which provisions the build root with them" >&2
  exit 2
fi

status=0
for flags in "-march=armv8-a" "-march=armv8.2-a+dotprod" "-mcpu=apple-m1"; do
  echo "neon-check: clang --target=aarch64-linux-gnu $flags"
  "$CC" --target=aarch64-linux-gnu $flags -O2 -Wall -Wextra -Werror -static -I"$SRC/include" \
    -o "$OUT/isa_check" "$SRC"/*.c "$CHECK" -lm -lpthread
  # qemu's default CPU ("max") has every arm64 feature the kernels use (dotprod, fp16)
  qemu-aarch64 "$OUT/isa_check" || status=1
done
exit $status
