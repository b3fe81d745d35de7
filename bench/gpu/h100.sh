#!/usr/bin/env bash
# Velo's GPU benchmarks on a bare Linux machine with an NVIDIA GPU (the H100 the `device` tool
# lends: no Swift, Bun or Vulkan loader there). Everything it needs travels in .carry/ and .gl/
# (bench/gpu/pack.sh makes them): the built library, Bun (xz), the CLI bundled into one file,
# the vocabularies and golden models, and Debian's Vulkan loader and GLVND packages.
#   bench/gpu/h100.sh golden | path MODEL | bench MODELS... | kernels MODELS... | batched MODELS... | rows MODEL ROWS... | batchprof MODEL B [SWITCHES...] |
#                     grammar MODELS... | depth MODEL DEPTHS... | depthab MODEL DEPTHS SWITCHES... | depthprof MODEL DEPTH pp|tg | splits tg|pp MODEL DEPTH N... | tune MODEL SHAPES... |
#                     tgvariants MODELS ROUNDS SWITCHES... | variants MODEL SWITCHES... | batchvariants MODEL B SWITCHES... | batchcheck MODEL B SETS... | firstload MODEL ROUNDS | llamacpp MODELS... | coopmat MODELS... | overflow GAINS... | spec | kv MODEL
# Models are synthesized there (random weights, real shapes) by Velo's own writer: SHAPE-TYPE
# for Llama (8b-q4_0), ARCH.SHAPE-TYPE for the others (qwen2.7b-q4_0, gemma2.9b-q4_0,
# phi3.mini-q4_0; src/gguf/synth.ts lists the shapes). VELO_LIB and VELO_JS choose another build
# of the library and CLI (before/after comparisons in one call).
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
# what pack.sh compressed: the library (and any other build put beside it for A/B runs) and the llama3 vocabulary
for z in "$C"/*.so.xz "$C"/shared/models/vocab/reconstructed/*.xz; do
  [ -f "$z" ] && [ ! -f "${z%.xz}" ] && xz -dc "$z" > "${z%.xz}"
done
export VELO_LIB=${VELO_LIB:-$C/libVelo.so} VELO_SHARED=$C/shared VELO_TEST_DATA=$C/shared/models NO_COLOR=1
VELO_JS=${VELO_JS:-$C/velo.js}
M=/tmp/models
mkdir -p $M
velo() { /tmp/bun "$VELO_JS" "$@"; }
model() { # [arch.]shape-type, e.g. 8b-q4_0, qwen2.7b-q4_0
  # (the type after the last hyphen, the arch before the first dot: gpt-oss.20b-q8_0)
  local f=$M/$1.gguf st=${1%-*} arch=llama
  case $st in *.*) arch=${st%%.*}; st=${st#*.} ;; esac
  [ -f "$f" ] || /tmp/bun "$C/synth.js" "$f" --arch "$arch" --shape "$st" --type "${1##*-}" >&2
  echo "$f"
}
what=$1; shift
case "$what" in
  path)  # the model's file, written first if it is not there (for commands of your own)
    model "$1" ;;
  golden)
    [ -f "$C/shared/models/golden/greedy_golden.json" ] || { echo "golden: the golden models are not packed (bench/gpu/pack.sh without --lean)" >&2; exit 2; }
    /tmp/bun "$C/golden.js" --backend vulkan ;;
  bench)  # pp512 and tg128 (5 repetitions), then once more with the per-kernel profile;
          # one JSON document per line in $OUT/bench.jsonl
    for m in "$@"; do
      f=$(model "$m")
      velo bench "$f" --backend vulkan -p 512 -n 128 -r 5 --json | tr -d '\n' >> "$OUT/bench.jsonl"; echo >> "$OUT/bench.jsonl"
      velo bench "$f" --backend vulkan -p 512 -n 128 -r 1 --profile --json | tr -d '\n' >> "$OUT/profile.jsonl"; echo >> "$OUT/profile.jsonl"
      tail -1 "$OUT/bench.jsonl" | python3 -c "import json,sys,statistics as st;j=json.load(sys.stdin);print('$m medians',[(r['test'],round(st.median(r['samples_tps']),1)) for r in j['results']])"
    done ;;
  kernels)  # pp512 of each model with the per-kernel GPU profile (slowest kernels and grids)
    for m in "$@"; do
      velo bench "$(model "$m")" --backend vulkan -p 512 -n 0 -r 2 --profile
    done ;;
  batched)  # 1, 2, 4, 8, 16 sequences of 128 prompt + 128 generated tokens
    for m in "$@"; do
      f=$(model "$m")
      velo bench "$f" --backend vulkan --max-batch-size 16 -p 128 -n 128 --json | tr -d '\n' >> "$OUT/batched.jsonl"; echo >> "$OUT/batched.jsonl"
      tail -1 "$OUT/batched.jsonl" | python3 -c "import json,sys;j=json.load(sys.stdin);print('$m batched',[(r['batch'],round(r['s_tg_tps'],1)) for r in j['results']])"
    done ;;
  rows)  # batched decode (1 … 64 sequences of 128 + 128 tokens) of one model with matvec up to
         # ROWS activation rows and the tiled/tensor-core matmul above: VELO_GPU_MATVEC_MAX_ROWS
    f=$(model "$1"); shift
    for r in "$@"; do
      VELO_GPU_MATVEC_MAX_ROWS=$r velo bench "$f" --backend vulkan --max-batch-size 64 -c 512 -p 128 -n 128 --json | tr -d '\n' > "$OUT/rows-$r.json"
      python3 -c "import json,sys;j=json.load(open(sys.argv[1]));print('matvec up to $r rows',[(r['batch'],round(r['s_tg_tps'],1)) for r in j['results']])" "$OUT/rows-$r.json"
    done ;;
  batchprof)  # where batched decode's time goes: one model, 1 … B sequences of 128 + 128 tokens,
              # the per-kernel profile of the B-sequence run, under each set of switches ('+'
              # separates assignments, '-' or none: the defaults): h100.sh batchprof MODEL B [SWITCHES...]
    m=$1 f=$(model "$1"); b=$2; shift 2
    for v in "${@:--}"; do
      e=(); [ "$v" = - ] || IFS=+ read -ra e <<< "$v"
      env "${e[@]}" /tmp/bun "$VELO_JS" bench "$f" --backend vulkan --max-batch-size "$b" -c 512 -p 128 -n 128 --profile --json | tr -d '\n' > /tmp/bp.json
      { cat /tmp/bp.json; echo; } >> "$OUT/batchprof-$m-$b.jsonl"
      echo "== $v"
      python3 -c "
import json,sys;j=json.load(open(sys.argv[1]));print([(r['batch'],round(r['s_tg_tps'],1)) for r in j['results']]);print('profile_ms (B=%s)' % j.get('profile_batch'),{k:round(v) for k,v in (j.get('profile_ms') or {}).items()})
k=j.get('kernel_ms') or {}
for n,v in sorted(k.items(),key=lambda kv:-kv[1]['ms'])[:16]: print('  %-44s %8.2f us x %5d = %7.1f ms' % (n, 1000*v['ms']/v['count'], v['count'], v['ms']))" /tmp/bp.json
    done ;;
  depth)  # long context: pp512 and tg128 after DEPTHS tokens (velo bench -d, llama-bench -d with
          # flash attention), one model: h100.sh depth MODEL 4096 16384
    f=$(model "$1"); shift
    L=/tmp/llama; mkdir -p $L; xz -dc .llama/llama.tar.xz | tar -C $L -xf -
    for d in "$@"; do
      velo bench "$f" --backend vulkan -p 512 -n 128 -d "$d" -r 3 -c $((d + 1024)) --json | tr -d '\n' > "$OUT/depth-$d.json"
      python3 -c "import json,sys,statistics as st;j=json.load(open(sys.argv[1]));print('velo depth $d',[(r['test'],round(st.median(r['samples_tps']),1)) for r in j['results']])" "$OUT/depth-$d.json"
    done
    $L/llama-bench -m "$f" -ngl 99 -p 512 -n 128 -r 3 -fa 1 -d "$(IFS=,; echo "$*")" -o json > "$OUT/depth-llamacpp.json" 2> /tmp/llama-bench.log || tail -20 /tmp/llama-bench.log
    python3 -c "import json,sys,statistics as st;print('llama.cpp', [(r['n_prompt'],r['n_gen'],r.get('n_depth'),round(st.median(r['samples_ts']),1)) for r in json.load(open(sys.argv[1]))])" "$OUT/depth-llamacpp.json" ;;
  splits)  # at depth under each split count: h100.sh splits tg|pp MODEL DEPTH N... (tg: tg128 under
           # VELO_GPU_ATTN_SPLITS, decode; pp: pp512 under VELO_GPU_PREFILL_SPLITS, prefill)
    kind=$1; f=$(model "$2"); d=$3; shift 3
    case $kind in tg) var=VELO_GPU_ATTN_SPLITS; run=(-p 0 -n 128) ;; pp) var=VELO_GPU_PREFILL_SPLITS; run=(-p 512 -n 0) ;; *) echo "splits tg|pp" >&2; exit 2 ;; esac
    for v in "$@"; do
      (export "$var=$v"; velo bench "$f" --backend vulkan "${run[@]}" -d "$d" -r 3 -c $((d + 1024)) --json) | tr -d '\n' > "$OUT/splits-$kind-$d-$v.json"
      python3 -c "import json,sys,statistics as st;j=json.load(open(sys.argv[1]));print('$var=$v depth $d',[(r['test'],round(st.median(r['samples_tps']),1)) for r in j['results']])" "$OUT/splits-$kind-$d-$v.json"
    done ;;
  grammar)  # decode with a JSON grammar against plain decode (bench/grammar.ts) on each model
    for m in "$@"; do
      /tmp/bun "$C/grammar.js" "$(model "$m")" --backend vulkan -n 128 -r 5 | tee "$OUT/grammar-$m.txt"
    done ;;
  tune)  # batched decode (1 … 16 sequences of 128 + 128 tokens) of one model for each
         # matrix×vector shape, VELO_GPU_MATVEC=THREADS,ROWS
    f=$(model "$1"); shift
    for s in "$@"; do
      VELO_GPU_MATVEC=$s velo bench "$f" --backend vulkan --max-batch-size 16 -c 512 -p 128 -n 128 --json | tr -d '\n' > "$OUT/tune-${s/,/x}.json"
      python3 -c "import json,sys;j=json.load(open(sys.argv[1]));print('matvec $s',[(r['batch'],round(r['s_tg_tps'],1)) for r in j['results']])" "$OUT/tune-${s/,/x}.json"
    done ;;
  batchvariants)  # batched decode (1 … B sequences of 128 + 128 tokens) of one model under each
                  # set of switches ('+' separates assignments, '-' is none), e.g.
                  # VELO_GPU_MATVEC_MAX_ROWS=8+VELO_GPU_COOP=1,0,1+VELO_GPU_SPLITK=16,1024,256
    f=$(model "$1"); b=$2; shift 2
    for v in "$@"; do
      e=(); [ "$v" = - ] || IFS=+ read -ra e <<< "$v"
      env "${e[@]}" /tmp/bun "$C/velo.js" bench "$f" --backend vulkan --max-batch-size "$b" -c 512 -p 128 -n 128 --json | tr -d '\n' > /tmp/bv.json
      { cat /tmp/bv.json; echo; } >> "$OUT/batchvariants.jsonl"
      python3 -c "import json,sys;j=json.load(open(sys.argv[1]));print('$v',[(r['batch'],round(r['s_tg_tps'],1)) for r in j['results']])" /tmp/bv.json
    done ;;
  tgvariants)  # tg128 of each model (MODELS: comma-separated) under each set of switches ('+'
               # separates assignments, '-' is none; VELO_LIB=FILE picks another build), ROUNDS
               # rounds alternating them (medians of 5 each), then one profiled run of each: the
               # decode kernels' µs a dispatch and the matvec kernels' compiler statistics
               # (TGDEPTH=D: after D tokens of context, velo bench -d)
               #   h100.sh tgvariants 8b-q4_0,1b-q4_0 2 - VELO_GPU_ATTN_SPLITS=8
    ms=${1//,/ }; rounds=$2; shift 2
    dep=(); [ -n "${TGDEPTH:-}" ] && dep=(-d "$TGDEPTH" -c $((TGDEPTH + 1024)))
    for r in $(seq "$rounds"); do for m in $ms; do f=$(model "$m"); for v in "$@"; do
      e=(); [ "$v" = - ] || IFS=+ read -ra e <<< "$v"
      env "${e[@]}" /tmp/bun "$VELO_JS" bench "$f" --backend vulkan -p 0 -n 128 "${dep[@]}" -r 5 --json 2>/dev/null | tr -d '\n' > /tmp/tgv.json
      { cat /tmp/tgv.json; echo; } >> "$OUT/tgvariants.jsonl"
      python3 -c "import json,sys,statistics as st;j=json.load(open(sys.argv[1]));print('round $r $m ${TGDEPTH:+d$TGDEPTH }$v',[(x['test'],round(st.median(x['samples_tps']),1)) for x in j['results']])" /tmp/tgv.json
    done; done; done
    for m in $ms; do f=$(model "$m"); for v in "${@:1:${TGPROF:-$#}}"; do  # TGPROF: profile the first N only
      e=(); [ "$v" = - ] || IFS=+ read -ra e <<< "$v"
      env "${e[@]}" VELO_GPU_PIPELINE_STATS=1 /tmp/bun "$VELO_JS" bench "$f" --backend vulkan -p 0 -n 128 "${dep[@]}" -r 1 --profile --json 2> /tmp/tgstats.txt | tr -d '\n' > /tmp/tgp.json
      echo "== profile $m $v"
      python3 -c "
import json,sys;j=json.load(open(sys.argv[1]));k=j.get('kernel_ms') or {};t=sum(v['ms'] for v in k.values())
print('  decode kernels %.1f ms over %s' % (t, [(x['test'],round(x['avg_tps'],1)) for x in j['results']]))
for n,v in sorted(k.items(),key=lambda kv:-kv[1]['ms'])[:16]: print('  %-44s %8.2f us x %5d = %7.1f ms' % (n, 1000*v['ms']/v['count'], v['count'], v['ms']))" /tmp/tgp.json
      grep -E "pipeline matvec_dot" /tmp/tgstats.txt | sort -u | cut -c1-300 || true
    done; done ;;
  depthab)  # pp512 at each depth under each set of switches ('+' separates assignments, '-' is
            # none; VELO_LIB=FILE picks another build), with the attention kernels' share of the
            # per-kernel profile and compiler statistics: h100.sh depthab MODEL "4096 16384" - VELO_LIB=/tmp/old.so
    f=$(model "$1"); ds=$2; shift 2
    for v in "$@"; do for d in $ds; do
      e=(); [ "$v" = - ] || IFS=+ read -ra e <<< "$v"
      env "${e[@]}" /tmp/bun "$VELO_JS" bench "$f" --backend vulkan -p 512 -n 0 -d "$d" -r 2 -c $((d + 1024)) --json 2>/dev/null \
        | python3 -c "import json,sys,statistics as st;j=json.load(sys.stdin);print('$v',[(r['test'],round(st.median(r['samples_tps']),1)) for r in j['results']])"
      env "${e[@]}" VELO_GPU_PIPELINE_STATS=1 /tmp/bun "$VELO_JS" bench "$f" --backend vulkan -p 512 -n 0 -d "$d" -r 1 -c $((d + 1024)) --profile 2>&1 \
        | grep -E "pipeline attention_(coop|cm2)|│ (attention|kv_gather)" | sort -u | cut -c1-160
    done; done ;;
  depthprof)  # where the time goes at depth: h100.sh depthprof MODEL DEPTH pp|tg (pp512 or tg32 after DEPTH tokens, per-kernel profile)
    f=$(model "$1"); d=$2
    case $3 in pp) run=(-p 512 -n 0) ;; *) run=(-p 0 -n 32) ;; esac
    velo bench "$f" --backend vulkan "${run[@]}" -d "$d" -c $((d + 1024)) -r 1 --profile > "$OUT/depthprof-$d-$3.txt" 2>&1
    grep -v "^bench:" "$OUT/depthprof-$d-$3.txt" | grep -vE "^[├┌└]" | cut -c1-120 ;;
  variants)  # pp512 of one model under each set of switches, e.g. VELO_GPU_COOP=2,0,2 or
              # VELO_GPU_NO_COOP_ATTN=1+VELO_GPU_NO_SPLITK=1 ('+' separates assignments; '-' is
              # none), with the compiler's statistics of the prefill kernels (VELO_GPU_PIPELINE_STATS)
    f=$(model "$1"); shift
    for v in "$@"; do
      e=(); [ "$v" = - ] || IFS=+ read -ra e <<< "$v"
      env "${e[@]}" VELO_GPU_PIPELINE_STATS=1 /tmp/bun "$C/velo.js" bench "$f" --backend vulkan -p 512 -n 0 -r 3 --json 2> /tmp/stats.txt | tr -d '\n' > /tmp/variant.json
      { echo "== $v"; cat /tmp/stats.txt; } >> "$OUT/stats.txt"
      { cat /tmp/variant.json; echo; } >> "$OUT/variants.jsonl"
      python3 -c "import json,sys;j=json.load(open(sys.argv[1]));print('$v',[(r['test'],round(r['avg_tps'],1)) for r in j['results']])" /tmp/variant.json
      grep -E "pipeline (matmul_coop|matmul_cm2|attention_tiled|attention_coop)" /tmp/stats.txt | sort -u | cut -c1-400
    done ;;
  llamacpp)  # llama.cpp's llama-bench (pp512, tg128; flash attention off and on) and
              # llama-batched-bench (8B shapes: 1-16 sequences of 128 + 128 tokens) with its Vulkan
              # backend on the same models: .llama from bench/gpu/pack-llamacpp.sh
    L=/tmp/llama; mkdir -p $L; xz -dc .llama/llama.tar.xz | tar -C $L -xf -
    cat $L/VERSION
    for m in "$@"; do
      f=$(model "$m")
      $L/llama-bench -m "$f" -ngl 99 -p 512 -n 128 -r 5 -fa 0,1 -o json > "$OUT/llamacpp-$m.json" 2> /tmp/llama-bench.log || tail -20 /tmp/llama-bench.log
      grep -m3 -iE "ggml_vulkan: [0-9]|matrix cores" /tmp/llama-bench.log || true
      python3 -c "import json,sys,statistics as st;print('llama.cpp $m medians (n_prompt, n_gen, flash_attn, t/s)',[(r['n_prompt'],r['n_gen'],r['flash_attn'],round(st.median(r['samples_ts']),1)) for r in json.load(open(sys.argv[1]))])" "$OUT/llamacpp-$m.json"
      case $m in 8b-*)
        $L/llama-batched-bench -m "$f" -ngl 99 -c 16896 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,2,4,8,16,32,64 -fa on 2>/dev/null \
          | tee "$OUT/llamacpp-batched-$m.txt" | grep -E "^\|" ;;
      esac
    done ;;
  coopmat)  # tensor-core prefill (matmul_coop, attention_coop) and the portable kernels against the
            # GPU's float32 path (bench/gpu/coopmat-check.ts; COOPMAT_TOKENS: prompt length, 100;
            # COOPMAT_ARGS: more of its options, e.g. "--cache-type-k q8_0 --page-size 12 --ctx 2048";
            # with .llama packed, llama.cpp's own GPU logits are one more row)
    fs=(); for m in "$@"; do fs+=("$(model "$m")"); done
    L=/tmp/llama
    [ -x $L/llama-logits ] || { [ -f .llama/llama.tar.xz ] && mkdir -p $L && xz -dc .llama/llama.tar.xz | tar -C $L -xf -; } || true
    ll=(); [ -x $L/llama-logits ] && ll=(--llama $L/llama-logits)
    /tmp/bun "$C/coopmat-check.js" ${COOPMAT_TOKENS:+--tokens $COOPMAT_TOKENS} ${COOPMAT_ARGS:-} "${ll[@]}" "${fs[@]}" ;;
  firstload)  # first load with no driver cache (__GL_SHADER_DISK_CACHE=0): wall time of `velo generate`
              # (a ~300-token prompt, 16 tokens) with matmul_cm2_T built in the background and at
              # load (VELO_GPU_CM2_AT_LOAD=1), alternating: h100.sh firstload MODEL ROUNDS
    f=$(model "$1")
    P=$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog']*30))")
    for r in $(seq "$2"); do for v in background atload; do
      e=(__GL_SHADER_DISK_CACHE=0); [ $v = atload ] && e+=(VELO_GPU_CM2_AT_LOAD=1)
      s=$(date +%s.%N)
      env "${e[@]}" /tmp/bun "$VELO_JS" generate "$f" "$P" --backend vulkan --temp 0 -n 16 --ignore-eos --json > /dev/null 2> /tmp/firstload.err
      t=$(date +%s.%N)
      echo "$v: $(python3 -c "print(round($t - $s, 2))") s; $(grep -o 'loaded.*' /tmp/firstload.err)"
    done; done ;;
  batchcheck)  # batched greedy decode under each set of switches against the first (bench/gpu/batch-check.ts):
              # h100.sh batchcheck MODEL B SETS... (identical tokens and max |Δlogit| a set)
    f=$(model "$1"); b=$2; shift 2
    /tmp/bun "$C/batch-check.js" --batch "$b" "$f" "$@" ;;
  overflow)  # float16 overflow (a product's sum or activation past 65504): 1.1B files (Q4_0, or
             # OVERFLOW_TYPE, e.g. q4_k) whose norm gains are each GAIN (synth --norm-gain), through
             # coopmat-check with float32 K/V; the tensor-core modes print "overflowed" and re-run
             # wider, so their logits stay near the float32 path's (their coopmat mode then equals
             # portable: expected). OVERFLOW_ARCH and OVERFLOW_SHAPE pick another family (a hybrid:
             # its re-run pass must start from the recurrent states the failed one began with)
    t=${OVERFLOW_TYPE:-q4_0} a=${OVERFLOW_ARCH:-llama} s=${OVERFLOW_SHAPE:-1b}
    for g in "${@:-30 300}"; do
      f=$M/$a.$s-$t-gain$g.gguf
      [ -f "$f" ] || /tmp/bun "$C/synth.js" "$f" --arch "$a" --shape "$s" --type "$t" --norm-gain "$g" >&2
      /tmp/bun "$C/coopmat-check.js" --tokens ${COOPMAT_TOKENS:-100} --cache-type-k f32 --cache-type-v f32 "$f" || true
    done ;;
  ttft)  # time to first token after a repeated prefix, cold and cached: MODEL PREFIX (tokens)
    f=$(model "$1")
    /tmp/bun "$C/prefix_cache.js" ttft "$f" --prefix "${2:-4096}" --suffix 32 --runs 3 --backend vulkan | tee "$OUT/ttft-$1.txt" ;;
  spec)  # speculative decoding on the GPU: an 8B target with prompt lookup and with a 3B draft
         # (same llama3 vocabulary), and the stories260K pair; verify cost of k+1 tokens vs 1
    S=$C/shared/models
    /tmp/bun "$C/speculative.js" "$S/stories260K.gguf" --draft "$S/stories260K-q8_0.gguf" -n 256 --runs 5 --backend vulkan > "$OUT/spec-stories-q8_0.json"
    /tmp/bun "$C/speculative.js" "$(model 8b-q4_0)" --spec ngram -n 128 --runs 3 --backend vulkan > "$OUT/spec-8b-ngram.json"
    /tmp/bun "$C/speculative.js" "$(model 8b-q4_0)" --draft "$(model 3b-q4_0)" -n 128 --runs 3 --backend vulkan > "$OUT/spec-8b-draft3b.json"
    for f in "$OUT"/spec-*.json; do python3 -c "import json,sys;j=json.load(open(sys.argv[1]));print(sys.argv[1].split('/')[-1], round(j['plain_tps'],1), 'adaptive', round(j['adaptive']['speedup'],3), 'fixed', round(j['fixed_k']['speedup'],3), 'acc', round(j['fixed_k']['acceptance'],3), j['verify_cost_vs_one_decode_step'])" "$f"; done ;;
  kv)  # issue 18 (KV cache types, fit before load) on one model, e.g. 8b-q4_0 (its context
       # 8192) or llama31.8b-q4_0 (131072, so the plan shortens it):
       # 1. `velo serve` with no flags: the plan line and banner, then one chat request answered;
       # 2. `velo bench --max-batch-size 16` at an 8k context;
       # 3. decode at depth, tg128 after 4096 tokens, with f32, f16 and q8_0 K/V (f16 no slower
       #    than f32 is the bar), and llama.cpp's llama-bench -d 4096 (f16 and q8_0 caches, flash
       #    attention on; .llama from bench/gpu/pack-llamacpp.sh) in the same call.
    f=$(model "$1")
    velo serve "$f" --backend vulkan --port 8181 > /dev/null 2> "$OUT/kv-serve.log" & sp=$!
    for _ in $(seq 600); do grep -q "on http://" "$OUT/kv-serve.log" && break; kill -0 $sp 2>/dev/null || break; sleep 1; done
    cat "$OUT/kv-serve.log"
    python3 -c "import json,urllib.request as u;b='http://127.0.0.1:8181/v1/';m=json.load(u.urlopen(b+'models'))['data'][0]['id'];q=json.dumps({'model':m,'messages':[{'role':'user','content':'Say hello'}],'max_tokens':16}).encode();print(u.urlopen(u.Request(b+'chat/completions',q,{'Content-Type':'application/json'}),timeout=300).read().decode()[:600])" | tee "$OUT/kv-serve-answer.json"
    kill $sp 2>/dev/null; wait $sp 2>/dev/null || true
    velo bench "$f" --backend vulkan --max-batch-size 16 -c 8192 -p 128 -n 128 --json | tr -d '\n' > "$OUT/kv-batched-8k.json"
    python3 -c "import json,sys;j=json.load(open(sys.argv[1]));print('batched at 8k', j['memory']['summary'], [(r['batch'],round(r['s_tg_tps'],1)) for r in j['results']])" "$OUT/kv-batched-8k.json"
    for t in f32 f16 q8_0; do
      velo bench "$f" --backend vulkan -p 0 -n 128 -d 4096 -r 3 --cache-type-k $t --cache-type-v $t --json | tr -d '\n' > "$OUT/kv-depth-$t.json"
      python3 -c "import json,sys,statistics as st;j=json.load(open(sys.argv[1]));print('velo $t', [(r['test'],round(st.median(r['samples_tps']),1)) for r in j['results']], j['memory']['summary'])" "$OUT/kv-depth-$t.json"
    done
    if [ -d .llama ]; then
      L=/tmp/llama; mkdir -p $L; xz -dc .llama/llama.tar.xz | tar -C $L -xf -
      for t in f16 q8_0; do
        $L/llama-bench -m "$f" -ngl 99 -p 0 -n 128 -d 4096 -r 3 -fa 1 -ctk $t -ctv $t -o json > "$OUT/kv-llamacpp-$t.json" 2> /tmp/llama-bench.log || tail -20 /tmp/llama-bench.log
        python3 -c "import json,sys,statistics as st;print('llama.cpp $t', [(r['n_gen'],r.get('n_depth'),round(st.median(r['samples_ts']),1)) for r in json.load(open(sys.argv[1]))])" "$OUT/kv-llamacpp-$t.json"
      done
    fi ;;
  *) echo "usage: $0 golden | bench MODELS... | kernels MODELS... | batched MODELS... | rows MODEL ROWS... | batchprof MODEL B [SWITCHES...] | grammar MODELS... | depth MODEL DEPTHS... | depthab MODEL DEPTHS SWITCHES... | depthprof MODEL DEPTH pp|tg | tune MODEL SHAPES... | variants MODEL SWITCHES... | llamacpp MODELS... | coopmat MODELS... | overflow GAINS... | spec | kv MODEL" >&2; exit 2 ;;
esac
