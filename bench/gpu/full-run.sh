#!/usr/bin/env bash
# Every H100 figure of bench/RESULTS.md in one device run (see bench/gpu/h100.sh):
#   export OUT; bash bench/gpu/full-run.sh      (carry .carry and .gl; bench/gpu/pack.sh first)
set -uo pipefail
H=bench/gpu/h100.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
bash $H golden
bash $H bench 1b-q4_0 1b-q8_0 1b-q4_k 8b-q4_0 8b-q8_0 8b-q4_k
bash $H batched 1b-q4_0 8b-q4_0 8b-q8_0 8b-q4_k
bash $H spec
