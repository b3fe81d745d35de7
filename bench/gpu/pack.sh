#!/usr/bin/env bash
# Packs what bench/gpu/h100.sh needs into .carry/ and .gl/ (both git-ignored): run after `make`.
#   bench/gpu/pack.sh [--lean]   --lean leaves the golden models out (3.7 MiB), to make room
#                                for .llama (bench/gpu/pack-llamacpp.sh) within the 64 MiB a run takes
# The tracked tree alone (tests/data, fuzz/corpus's 7,700 files) no longer leaves room for .carry
# within those 64 MiB: for a device call, take both out of the index and ignore them
# (`git rm -r -q --cached tests/data fuzz/corpus`, both in .git/info/exclude), and put them back
# after it (`git reset -q -- tests/data fuzz/corpus`, the exclude lines removed) before any commit.
set -euo pipefail
cd "$(dirname "$0")/../.."
S=tests/data   # packed as .carry/shared/models, the layout h100.sh reads
mkdir -p .carry/shared/models/vocab/reconstructed .carry/shared/models/golden .gl
# the library and the llama3 vocabulary travel xz-compressed (h100.sh unpacks them): with .llama
# beside them a call's tree stays within its 64 MiB
scripts/toolchain.sh run strip -o .carry/libVelo.so .build/release/libVelo.so
xz -T2 -6 -f .carry/libVelo.so
[ -f .carry/bun.xz ] || xz -9e -T2 -c node_modules/bun/bin/bun.exe > .carry/bun.xz
B="scripts/bun build --target=bun"
$B cli/index.ts --outfile .carry/velo.js >/dev/null
$B src/gguf/synth.ts --outfile .carry/synth.js >/dev/null
$B bench/gpu/golden.ts --outfile .carry/golden.js >/dev/null
$B bench/speculative.ts --outfile .carry/speculative.js >/dev/null
$B bench/grammar.ts --outfile .carry/grammar.js >/dev/null
$B bench/gpu/coopmat-check.ts --outfile .carry/coopmat-check.js >/dev/null
$B bench/gpu/batch-check.ts --outfile .carry/batch-check.js >/dev/null
$B bench/prefix_cache.ts --outfile .carry/prefix_cache.js >/dev/null
cp "$S/vocab/ggml-vocab-llama-spm.gguf" .carry/shared/models/vocab/
cp "$S/vocab/ggml-vocab-phi-3.gguf" .carry/shared/models/vocab/   # phi3 shapes (0.7 MiB)
xz -T2 -6 -c "$S/vocab/reconstructed/ggml-vocab-llama3-bpe.reconstructed.gguf" > .carry/shared/models/vocab/reconstructed/ggml-vocab-llama3-bpe.reconstructed.gguf.xz
rm -f .carry/shared/models/*.gguf .carry/shared/models/golden/*
if [ "${1:-}" != --lean ]; then
  # tiny-random-llama3-bpe (18 MB) stays out: golden.ts says so and checks the rest
  cp "$S"/stories260K*.gguf "$S/llama-2-tiny-random.gguf" .carry/shared/models/
  cp "$S/golden/greedy_golden.json" .carry/shared/models/golden/
fi
if ! ls .gl/*.deb >/dev/null 2>&1; then
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  mkdir -p /tmp/amd64/partial
  apt-get $o update -qq && (cd .gl && apt-get $o download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
du -sh .carry .gl
