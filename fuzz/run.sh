#!/usr/bin/env bash
# Fuzzing Velo's C ABI with libFuzzer (clang from the build root's Swift toolchain).
#
#   fuzz/run.sh build                 the coverage-instrumented library (.build-fuzz) and the harnesses (fuzz/.build/<name>)
#   fuzz/run.sh short                 each harness for FUZZ_SECONDS (default 5) from its seeds, then 20 whole-file
#                                     mutants (mutate.ts, seed FUZZ_SEED, default 1); part of make test
#   fuzz/run.sh long [SECONDS]        each harness until FUZZ_RUNS executions (default 1,000,000) or SECONDS
#                                     (default 7200), corpora kept in fuzz/corpus (in the repository); then 1000 mutants
#   fuzz/run.sh again [SECONDS]       as long, on the harnesses and seeds already built (FUZZ_HARNESSES="gguf tokenize")
#   fuzz/run.sh regress               every saved crash in fuzz/regressions/<name>/ replayed (must not crash)
#
# Harnesses: gguf (velo_model_open on arbitrary files, then info/tokenize/pieces), tokenize
# (arbitrary bytes through 12 tokenizer vocabularies, arbitrary ids through detokenize),
# grammar (arbitrary text as a GBNF grammar through velo_engine_submit), and template (chat
# templates: hostile messages through every real template, hostile templates; fuzz/template.ts
# under Jazzer.js, libFuzzer's engine on Node with coverage from its instrumentation). Seeds:
# the GGUF files of tests/data, the tokenizer vectors (*.inp), the repo's grammars, the
# templates. A crash input is written to fuzz/.build/crash-*; copy it into
# fuzz/regressions/<name>/ once fixed.
set -euo pipefail
[ "$(uname -s)" = Linux ] || { echo "fuzz: skipped (libFuzzer comes from the Linux build root)"; exit 0; }
HERE=$(CDPATH= cd -P "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
MODELS=${VELO_TEST_DATA:-$REPO/tests/data}
OUT=$HERE/.build
HARNESSES=(${FUZZ_HARNESSES:-gguf tokenize grammar template})
TC=("$REPO/scripts/toolchain.sh" run)
"$REPO/scripts/toolchain.sh" needed || TC=()
CLANG=${CLANG:-/usr/libexec/swift/bin/clang}
# The library the C harnesses link: Velo built with SanitizerCoverage (inline 8-bit edge counters
# with their PC table, as libFuzzer reads them, and comparisons) and
# AddressSanitizer into a scratch path of its own, so that libFuzzer is guided by the library's
# branches, not only the harness's, and a bad read inside it stops the run. Its C kernels get the
# same flags. No coverage runtime is linked in: the harness's libFuzzer and ASan provide it.
FUZZ_SCRATCH=$REPO/.build-fuzz
LIB=$FUZZ_SCRATCH/release

build_lib() {
  (cd "$REPO" && "${TC[@]}" swift build -c release --scratch-path "$FUZZ_SCRATCH" \
    -Xswiftc -sanitize=address -Xswiftc -sanitize-coverage=edge,inline-8bit-counters,pc-table,trace-cmp \
    -Xcc -fsanitize=address -Xcc -fsanitize-coverage=inline-8bit-counters,pc-table,trace-cmp \
    -Xlinker --version-script="$REPO/swift/exports.map") >"$OUT/build-lib.log" 2>&1 \
    || { tail -30 "$OUT/build-lib.log"; echo "fuzz: the instrumented library did not build" >&2; exit 1; }
  "${TC[@]}" sh -c "nm -D '$LIB/libVelo.so' | grep -q __sanitizer_cov_8bit_counters_init" \
    || { echo "fuzz: $LIB/libVelo.so has no coverage instrumentation" >&2; exit 1; }
}

build() {
  mkdir -p "$OUT" && rm -f "${HARNESSES[@]/#/$OUT/}"
  build_lib
  # the template harness: one CommonJS bundle for Node (Jazzer.js finds `fuzz` in the shim)
  "$REPO/node_modules/bun/bin/bun.exe" build "$HERE/template.ts" --target=node --format=cjs --external @jazzer.js/core \
    --outfile "$OUT/template-bundle.cjs" >/dev/null
  printf 'module.exports.fuzz = require("./template-bundle.cjs").fuzz;\n' > "$OUT/template.cjs"
  "${TC[@]}" sh -c 'command -v node >/dev/null' || { echo "fuzz: the template harness needs Node.js (make setup installs it in the build root)" >&2; exit 2; }
  for h in "${HARNESSES[@]}"; do
    [ "$h" = template ] && continue
    "${TC[@]}" "$CLANG" -g -O1 -fsanitize=fuzzer,address -I"$HERE" "$HERE/$h.c" -L"$LIB" -lVelo -Wl,-rpath,"$LIB" -o "$OUT/$h" 2>&1 | { grep -v 'eh_frame' || true; }
    [ -x "$OUT/$h" ] || { echo "fuzz: building $h failed" >&2; exit 1; }
  done
}

# seeds: a folder per harness, rebuilt each time (small files only)
seeds() {
  local d=$OUT/seeds
  rm -rf "$d" && mkdir -p "$d/gguf" "$d/tokenize" "$d/grammar" "$d/template"
  cp "$MODELS"/templates/*.jinja "$d/template/"
  # GGUF: the small models whole, the large one cut (the header and metadata are what is parsed)
  for f in "$MODELS"/*.gguf "$MODELS"/vocab/*.gguf; do head -c 262144 "$f" > "$d/gguf/$(basename "$f")"; done
  local i=0
  for f in "$MODELS"/vocab/*.inp; do
    # each vector file is tests separated by __ggml_vocab_test__ lines: one seed per test
    awk -v dir="$d/tokenize" -v base="$(basename "$f")" 'BEGIN{RS="\n__ggml_vocab_test__\n"} {n++; printf "%s", $0 > (dir "/" base "." n)}' "$f"
  done
  for f in "$d/tokenize"/*; do i=$((i + 1)); printf "\\x$(printf %02x $((i % 256)))" | cat - "$f" > "$f.x" && mv "$f.x" "$f"; done
  cp "$REPO"/gen/*.gbnf "$d/grammar/" 2>/dev/null || true
  printf 'root ::= "a" | "b"' > "$d/grammar/alt"
  printf 'root ::= [0-9]+ ("." [0-9]+)?\n' > "$d/grammar/num"
  printf 'root ::= obj\nobj ::= "{" ws (str ":" ws val ("," ws str ":" ws val)*)? "}"\nstr ::= "\\"" [^"]* "\\""\nval ::= str | obj | [0-9]+\nws ::= [ \\t\\n]*\n' > "$d/grammar/json"
}

run() {
  local secs=$1 keep=$2 total=0
  for h in "${HARNESSES[@]}"; do
    local corpus=$OUT/corpus-$h
    # the kept corpora (fuzz/corpus/, in the repository) grow in long runs and seed short ones
    local kept=$HERE/corpus/$h
    [ "$keep" = 1 ] && corpus=$kept
    mkdir -p "$corpus" "$kept"
    local log=$OUT/$h.log
    (cd "$OUT" && "${TC[@]}" env ASAN_OPTIONS=detect_leaks=0 VELO_MODELS_DIR="$MODELS" VELO_TEMPLATES="$MODELS/templates" $(harness "$h") "$corpus" "$OUT/seeds/$h" $([ "$keep" = 1 ] || echo "$kept") \
      $(options "$h") -max_total_time="$secs" ${FUZZ_RUNS:+-runs=$FUZZ_RUNS} -timeout=20 -rss_limit_mb=4096 -max_len=65536 -artifact_prefix="$OUT/crash-$h-") >"$log" 2>&1 \
      || { tail -30 "$log"; echo "fuzz: $h FAILED (input in $OUT/crash-$h-*)"; exit 1; }
    local execs cov; execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
    [ -n "$execs" ] || execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
    # edges libFuzzer saw (library and harness): the last status line's cov
    cov=$(grep -oE '^#[0-9]+.* cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
    echo "fuzz: $h ok, ${execs:-?} executions, ${cov:-?} edges covered, in at most ${secs}s"
  done
}

# the command that runs harness $1, and what goes before libFuzzer's own options
harness() { if [ "$1" = template ]; then echo "node $REPO/node_modules/@jazzer.js/core/dist/cli.js $OUT/template.cjs"; else echo "$OUT/$1"; fi; }
options() { if [ "$1" = template ]; then echo "--sync --"; else echo "-detect_leaks=0"; fi; }

regress() {
  for h in "${HARNESSES[@]}"; do
    local dir=$HERE/regressions/$h
    [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] || continue
    (cd "$OUT" && "${TC[@]}" env ASAN_OPTIONS=detect_leaks=0 VELO_MODELS_DIR="$MODELS" VELO_TEMPLATES="$MODELS/templates" $(harness "$h") "$dir"/* $(options "$h")) >"$OUT/$h-regress.log" 2>&1 || { tail -30 "$OUT/$h-regress.log"; echo "fuzz: $h regression FAILED"; exit 1; }
    echo "fuzz: $h regressions ok ($(ls "$dir" | wc -l) inputs)"
  done
}

# whole files with 8-byte fields overwritten, through velo generate and velo serve (mutate.ts)
mutate() {
  "${TC[@]}" "$REPO/node_modules/bun/bin/bun.exe" "$HERE/mutate.ts" --count "$1" --seed "$2" || { echo "fuzz: mutate FAILED (the mutant is in $OUT/mutants/)"; exit 1; }
}

case "${1:-short}" in
  build) build ;;
  lib) mkdir -p "$OUT"; build_lib ;;
  # again on what the last build and seeds left (FUZZ_HARNESSES picks some: two at once on two cores)
  again) FUZZ_RUNS=${FUZZ_RUNS:-1000000} run "${2:-7200}" 1 ;;
  short) build; seeds; regress; run "${FUZZ_SECONDS:-5}" 0; mutate "${FUZZ_MUTANTS:-20}" "${FUZZ_SEED:-1}" ;;
  # long: each harness until 1,000,000 executions (FUZZ_RUNS) or SECONDS, whichever comes first
  long) build; seeds; regress; FUZZ_RUNS=${FUZZ_RUNS:-1000000} run "${2:-7200}" 1; mutate "${FUZZ_MUTANTS:-1000}" "${FUZZ_SEED:-$(date +%j)}" ;;
  regress) build; regress ;;
  *) echo "usage: fuzz/run.sh build|short|long [SECONDS]|regress" >&2; exit 2 ;;
esac
