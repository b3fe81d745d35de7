#!/usr/bin/env bash
# toolchain.sh — Velo's build environment on Linux hosts without Swift.
#
#   scripts/toolchain.sh setup        make or refresh the Debian 13 root (Swift 6, glslc,
#                                     spirv-cross, lavapipe, Bun) — once per machine
#   scripts/toolchain.sh run CMD...   run CMD inside it, in the caller's directory
#   scripts/toolchain.sh needed       exit 0 when this host needs the root
#
# The root lives in a per-machine cache outside the checkout (VELO_ROOT, default
# /var/cache/velo/trixie), so every clone on the machine shares it. Inside, the checkout,
# ../shared, the caller's directory, $HOME, /tmp and the usual data folders are visible at
# the same paths, so file arguments work unchanged.
set -euo pipefail
# This script's folder, symlinks resolved, without `realpath -e` (GNU only: macOS's realpath has
# no -e, and the Makefile runs `toolchain.sh needed` on every make, on a Mac too).
src=${BASH_SOURCE[0]}
while [ -L "$src" ]; do
  dir=$(CDPATH= cd -P "$(dirname "$src")" && pwd)
  src=$(readlink "$src")
  case $src in /*) ;; *) src=$dir/$src ;; esac
done
HERE=$(CDPATH= cd -P "$(dirname "$src")" && pwd)
REPO=$(dirname "$HERE")
ROOT=${VELO_ROOT:-/var/cache/velo/trixie}

die() { printf 'velo toolchain: %s\n' "$*" >&2; exit 2; }

needed() {
  # Swift 6 missing, or a libc too old for a library built against glibc 2.38.
  [ "$(uname -s)" = Linux ] || return 1
  command -v swift >/dev/null 2>&1 || return 0
  local v; v=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  [ -n "$v" ] && [ "$(printf '%s\n2.38\n' "$v" | sort -V | head -1)" != 2.38 ]
}

bun_bin() { echo "$REPO/node_modules/bun/bin/bun.exe"; }

setup() {
  [ "$(id -u)" = 0 ] || die "provisioning the build root needs root (debootstrap, chroot); run as root or set VELO_ROOT to a provisioned root"
  local bun; bun=$(bun_bin)
  [ -x "$bun" ] || die "Bun is missing: run 'npm ci' first (make does)"
  BUN_BIN="$bun" EXTRA_PKGS="xz-utils nodejs" "$HERE/provision-root.sh" "$ROOT"
}

binds() {
  local list=("$REPO") d
  [ -d "$REPO/../shared" ] && list+=("$(realpath "$REPO/../shared")")
  for d in "$PWD" "${HOME:-}" /tmp /home /mnt /media /srv /data /work /opt/models; do
    [ -n "$d" ] && [ -d "$d" ] && list+=("$(realpath "$d")")
  done
  local out=() seen
  for d in "${list[@]}"; do
    case "$d" in /) continue;; esac
    case "$ROOT/" in "$d"/*) continue;; esac       # never bind a folder holding the root
    seen=0
    for o in "${out[@]}"; do case "$d/" in "$o"/*) seen=1;; esac; done
    [ $seen = 0 ] && out+=("$d")
  done
  (IFS=:; echo "${out[*]}")
}

run() {
  [ -e "$ROOT/.tc/provisioned" ] || setup >&2
  local pass="TERM NO_COLOR FORCE_COLOR CI COLUMNS VK_DRIVER_FILES VK_ICD_FILENAMES"
  pass+=" $(compgen -e | grep -E '^(VELO_|BUN_|VK_)' | tr '\n' ' ' || true)"
  TC_BINDS="$(binds)" TC_PASS_ENV="$pass" exec "$HERE/in-root.sh" "$ROOT" "$@"
}

case "${1:-}" in
  setup) setup ;;
  run) shift; [ $# -ge 1 ] || die "usage: toolchain.sh run CMD..."; run "$@" ;;
  needed) needed ;;
  *) die "usage: toolchain.sh setup | run CMD... | needed" ;;
esac
