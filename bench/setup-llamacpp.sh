#!/usr/bin/env bash
# Installs the llama.cpp reference runner's dependencies into bench/llamacpp/node_modules:
# node-llama-cpp plus only this platform's prebuilt CPU build of llama.cpp. node-llama-cpp lists
# every platform's prebuilt as an optional dependency, CUDA and Vulkan variants included
# (hundreds of MB), so optional dependencies are left out and the one needed is added by name.
# Running it again does nothing while package.json and package-lock.json are unchanged.
set -euo pipefail
cd "$(dirname "$0")/llamacpp"

stamp=node_modules/.installed
if [ -f "$stamp" ] && [ "$stamp" -nt package.json ] && [ "$stamp" -nt package-lock.json ]; then
  exit 0
fi
command -v npm >/dev/null || { echo "setup-llamacpp: npm is needed (Node.js 20 or newer)" >&2; exit 1; }

version=$(node -p 'require("./package.json").dependencies["node-llama-cpp"]')
case "$(uname -s)-$(uname -m)" in
  Linux-x86_64) prebuilt=linux-x64 ;;
  Linux-aarch64) prebuilt=linux-arm64 ;;
  Darwin-arm64) prebuilt=mac-arm64-metal ;;
  Darwin-x86_64) prebuilt=mac-x64 ;;
  *) echo "setup-llamacpp: no node-llama-cpp prebuilt for $(uname -s) $(uname -m)" >&2; exit 1 ;;
esac

# --ignore-scripts: node-llama-cpp's postinstall may try to compile llama.cpp from source; the
# runner only ever loads the prebuilt (getLlama({build: "never"})).
flags=(--omit=optional --ignore-scripts --no-audit --no-fund)
# `npm install`, not `npm ci`: the lock cannot list prebuilts that a registry mirror lacks
# (mac/win variants), and `npm ci` refuses such a lock as out of sync.
npm install "${flags[@]}"
npm install "${flags[@]}" --no-save "@node-llama-cpp/$prebuilt@$version"
touch "$stamp"
