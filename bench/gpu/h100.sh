#!/usr/bin/env bash
# Velo's GPU benchmarks on a bare Linux machine with an NVIDIA GPU (the H100 the `device` tool
# lends: no Swift, Bun or Vulkan loader there). Everything it needs travels in .carry/ and .gl/
# (bench/gpu/pack.sh makes them): the built library, Bun (xz), the CLI bundled into one file,
# the vocabularies and golden models, and Debian's Vulkan loader and GLVND packages.
#   bench/gpu/h100.sh golden | bench MODELS... | batched MODELS... | spec
# Models are synthesized there (random weights, real shapes) by Velo's own writer.
set -euo pipefail
C=$PWD/.carry
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if ! ldconfig -p | grep -q libvulkan.so.1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
[ -x /tmp/bun ] || { xz -dc "$C/bun.xz" > /tmp/bun; chmod +x /tmp/bun; }
export VELO_LIB=$C/libVelo.so VELO_SHARED=$C/shared NO_COLOR=1
M=/tmp/models
mkdir -p $M
velo() { /tmp/bun "$C/velo.js" "$@"; }
model() { # shape-type, e.g. 8b-q4_0
  local f=$M/$1.gguf
  [ -f "$f" ] || /tmp/bun "$C/synth.js" "$f" --shape "${1%%-*}" --type "${1#*-}" >&2
  echo "$f"
}
what=$1; shift
case "$what" in
  golden) /tmp/bun "$C/golden.js" --backend vulkan ;;
  bench)  # pp512 and tg128, with the per-kernel profile
    for m in "$@"; do
      f=$(model "$m")
      velo bench "$f" --backend vulkan -p 512 -n 128 -r 3 --json > "$OUT/bench-$m.json"
      velo bench "$f" --backend vulkan -p 512 -n 128 -r 1 --profile --json > "$OUT/profile-$m.json"
      velo bench "$f" --backend vulkan -p 512 -n 128 -r 3
    done ;;
  batched)
    for m in "$@"; do
      f=$(model "$m")
      velo bench "$f" --backend vulkan --max-batch-size 16 -p 128 -n 128 --json > "$OUT/batched-$m.json"
      velo bench "$f" --backend vulkan --max-batch-size 16 -p 128 -n 128
    done ;;
  *) echo "usage: $0 golden | bench MODELS... | batched MODELS..." >&2; exit 2 ;;
esac
