#!/bin/sh
# ci-macos.sh — the macOS workflow's test steps (.github/workflows/macos.yml), after `make` has
# built libVelo.dylib and gen/metal/velo.metallib. Works on a developer's Mac too, where
# `make test` remains the full suite.
#   scripts/ci-macos.sh device     the Metal device, as Metal names it
#   scripts/ci-macos.sh cpu        every test that needs no GPU: XCTest (its GPU tests skipped,
#                                  VELO_TEST_GPU=off), NEON, the bun tests on the CPU backend
#   scripts/ci-macos.sh metallib   velo.metallib's functions as pipelines on whatever GPU there
#                                  is (a virtual one on GitHub's runners): says that no kernel ran
#   scripts/ci-macos.sh metal      the Metal tests; fails where there is no real Apple GPU
set -eu
cd "$(dirname "$0")/.."
BUN=node_modules/bun/bin/bun.exe
SWIFT_TEST="swift test -c release -Xswiftc -enable-testing --scratch-path .build-test"
# the kernels, wherever the library is loaded from (make sets the same for make test)
export VELO_METALLIB="$PWD/gen/metal/velo.metallib"
# bun tests that need neither a GPU nor a network: the engine on the CPU backend
BUN_CPU_TESTS="tests/test-data.test.ts tests/gguf.test.ts tests/tokenize.test.ts tests/generate.test.ts tests/json-schema.test.ts tests/tools.test.ts tests/chat.test.ts"

metal_device() { # scripts/metal-device.swift, built once
  exe=.build/metal-device
  if [ ! -x "$exe" ] || [ scripts/metal-device.swift -nt "$exe" ]; then
    mkdir -p .build
    xcrun swiftc -O -target "$(uname -m)-apple-macos14" -o "$exe" scripts/metal-device.swift
  fi
  "$exe" "$@"
}

case "${1:-}" in
device)
  metal_device || true
  ;;
cpu)
  echo "== XCTest, its GPU tests skipped (VELO_TEST_GPU=off; XCTest counts them)"
  VELO_TEST_GPU=off $SWIFT_TEST
  echo "== the NEON kernels against the scalar ones (make test-neon)"
  sh scripts/neon-check.sh
  echo "== bun tests on the CPU backend: $BUN_CPU_TESTS"
  VELO_BACKEND=cpu "$BUN" test --timeout 120000 $BUN_CPU_TESTS
  echo "== models written by src/gguf/synth.ts, generated with on the CPU backend"
  "$BUN" scripts/synth-check.ts --backend cpu
  echo "== the ./velo launcher"
  ./velo --version
  ;;
metallib)
  set +e
  metal_device
  status=$?
  set -e
  [ "$status" = 0 ] || [ "$status" = 3 ] || { echo "no Metal device at all (status $status)"; exit "$status"; }
  echo "== velo.metallib's functions as compute pipelines on this device"
  metal_device gen/metal/velo.metallib || [ "$status" = 3 ] || exit 1
  msg="no Metal kernel ran in this job: velo.metallib was built, checked (msl-check) and loaded; the Metal tests run in the 'metal' job on a real Apple GPU"
  echo "$msg"
  [ -z "${GITHUB_ACTIONS:-}" ] || echo "::notice title=Metal kernels not run here::$msg"
  ;;
metal)
  set +e
  metal_device
  status=$?
  set -e
  if [ "$status" != 0 ]; then
    echo "the Metal tests need a real Apple GPU, and this machine has none (the device line above; status $status)"
    exit 1
  fi
  echo "== every function of velo.metallib as a compute pipeline on this GPU"
  metal_device gen/metal/velo.metallib
  echo "== the GPU XCTests on Metal (every kernel against a CPU reference)"
  $SWIFT_TEST --filter 'GPUKernelTests|GPUUploadTests|KVCacheTypeTests|NewQuantTypeTests'
  echo "== Metal against the CPU on models written by src/gguf/synth.ts"
  "$BUN" scripts/synth-check.ts --backend metal
  ;;
*)
  echo "usage: scripts/ci-macos.sh device|cpu|metallib|metal" >&2
  exit 2
  ;;
esac
