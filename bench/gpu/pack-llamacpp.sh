#!/usr/bin/env bash
# Packs llama.cpp's own llama-bench and llama-batched-bench, and bench/gpu/llama-logits.cpp,
# with its Vulkan backend, into .llama/llama.tar.xz (git-ignored, ~7 MB) for `bench/gpu/h100.sh
# llamacpp` and `coopmat`: llama.cpp side by side with Velo on the H100, in the same session.
#
# No llama.cpp build fits what travels to the H100, and nothing can be built there, so this
# uses what the npm registry has: node-llama-cpp 3.22.1 (bench/llamacpp, ../setup-llamacpp.sh)
# carries the llama.cpp source it was built from (a git bundle), and
# @node-llama-cpp/linux-x64-vulkan@3.22.1 the prebuilt shared libraries (libllama, ggml with
# its Vulkan backend). The two tools are compiled here (host g++, glibc 2.36, so they run on
# the H100's 2.39) against those headers and linked to those libraries.
set -euo pipefail
cd "$(dirname "$0")/../.."
NLC=bench/llamacpp/node_modules/node-llama-cpp
[ -f "$NLC/llama/gitRelease.bundle" ] || { echo "run bench/setup-llamacpp.sh first (node-llama-cpp's llama.cpp source)" >&2; exit 1; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
git clone -q "$NLC/llama/gitRelease.bundle" "$W/src" 2>/dev/null
(cd "$W" && npm pack -q @node-llama-cpp/linux-x64-vulkan@3.22.1 >/dev/null && tar xzf node-llama-cpp-linux-x64-vulkan-3.22.1.tgz)
B=$W/package/bins/linux-x64-vulkan
mkdir -p "$W/out"
for t in llama-bench batched-bench; do
  name=$t; [ "$t" = batched-bench ] && name=llama-batched-bench
  g++ -O2 -DNDEBUG -std=c++17 -I"$W/src/include" -I"$W/src/ggml/include" -I"$W/src/common" -I"$W/src/vendor" \
    "$W/src/tools/$t/$t.cpp" "$W/src/tools/$t/main.cpp" -o "$W/out/$name" \
    -L"$B" -l:libllama-common.so -l:libllama.vulkan.v0.5.0.so -l:libggml.vulkan.v0.5.0.so -l:libggml-base.so \
    -Wl,-rpath,'$ORIGIN' -pthread
done
# llama.cpp's logits for coopmat-check.ts (bench/gpu/llama-logits.cpp)
g++ -O2 -DNDEBUG -std=c++17 -I"$W/src/include" -I"$W/src/ggml/include" bench/gpu/llama-logits.cpp -o "$W/out/llama-logits" \
  -L"$B" -l:libllama.vulkan.v0.5.0.so -l:libggml.vulkan.v0.5.0.so -l:libggml-base.so -Wl,-rpath,'$ORIGIN'
# the libraries they load: ggml's registry loads the Vulkan and CPU backends from next to the binary
cp "$B"/{libggml-base.so,libggml-cpu-x64.so,libggml-vulkan.so,libggml.vulkan.v0.5.0.so,libllama.vulkan.v0.5.0.so,libllama-common.so} "$W/out/"
(cd "$W/src" && git log -1 --format='llama.cpp %h %cd' --date=short) > "$W/out/VERSION"
mkdir -p .llama
tar -C "$W/out" -cf - . | xz -9 -T2 > .llama/llama.tar.xz
du -h .llama/llama.tar.xz
