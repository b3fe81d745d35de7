// Velo's CPU dot-product kernels against llama.cpp's own, called through bun:ffi on the same
// bytes: ggml-cpu from node-llama-cpp's prebuilt llama.cpp (the variant llama.cpp itself would
// load here: the highest ggml_backend_score) and swift/Sources/CKernels, built for the test with
// clang -O3 as Package.swift builds it (the library does not export its C kernels). For every weight type:
// rows made by llama.cpp's quantize_row_<type>, activations quantized by each engine (the bytes
// must be identical), then each weight row times each activation row by llama.cpp's
// ggml_vec_dot_<type>_<act> and by Velo's ck_vec_dot and ck_matmul (its tiles: several rows at
// once), at every ISA level Velo has on this machine. The two sum the same integers block by
// block, so they may differ only by float rounding of the block sums.
//
// This is what tells a kernel bug from the model-level differences of quantized activations: a
// 1e-7 difference upstream (an accumulation order) can flip one Q8 rounding by a whole step in
// one engine and not the other (bench/RESULTS.md, gpt-oss).
import { afterAll, describe, expect, test } from "bun:test";
import { dlopen, FFIType, ptr } from "bun:ffi";
import { mkdtempSync, readdirSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { ensureLlamaCpp } from "../bench/llamacpp/reference";

const repo = resolve(import.meta.dir, "..");
const lib = (dir: string, re: RegExp) => readdirSync(dir).filter((f) => re.test(f)).map((f) => join(dir, f));

/** The folder of node-llama-cpp's prebuilt binaries for this platform that holds ggml-cpu. */
function llamaBins(): string {
  ensureLlamaCpp();
  const root = join(repo, "bench", "llamacpp", "node_modules", "@node-llama-cpp");
  for (const pkg of existsSync(root) ? readdirSync(root) : []) {
    const bins = join(root, pkg, "bins");
    for (const d of existsSync(bins) ? readdirSync(bins) : []) {
      if (lib(join(bins, d), /^libggml-cpu.*\.(so|dylib)$/).length) return join(bins, d);
    }
  }
  throw new Error(`no libggml-cpu in ${root}: node-llama-cpp's prebuilt llama.cpp is not installed as expected`);
}

const sym = (args: FFIType[], returns: FFIType = FFIType.void) => ({ args, returns });
const P = FFIType.ptr, I64 = FFIType.i64, I32 = FFIType.i32, U64 = FFIType.u64;

const dir = llamaBins();
dlopen(lib(dir, /^libggml-base\.(so|dylib)$/)[0]!, { ggml_init: sym([P], P) });
// the variant llama.cpp's loader would pick: the highest score (0: this CPU cannot run it)
const cpuLibs = lib(dir, /^libggml-cpu.*\.(so|dylib)$/).map((path) => {
  const l = dlopen(path, { ggml_backend_score: sym([], I32) });
  const score = Number(l.symbols.ggml_backend_score());
  l.close();
  return { path, score };
}).sort((a, b) => b.score - a.score);
const ggmlPath = cpuLibs[0]!.path;

// [name, Velo/ggml type id, llama.cpp's activation type, block elements, block bytes]
const WEIGHTS = [
  ["q4_0", 2, "q8_0", 32, 18], ["q4_1", 3, "q8_1", 32, 20], ["q5_0", 6, "q8_0", 32, 22], ["q5_1", 7, "q8_1", 32, 24],
  ["q8_0", 8, "q8_0", 32, 34], ["q2_K", 10, "q8_K", 256, 84], ["q3_K", 11, "q8_K", 256, 110], ["q4_K", 12, "q8_K", 256, 144],
  ["q5_K", 13, "q8_K", 256, 176], ["q6_K", 14, "q8_K", 256, 210], ["iq4_nl", 20, "q8_0", 32, 18], ["iq4_xs", 23, "q8_K", 256, 136],
  ["mxfp4", 39, "q8_0", 32, 17],
] as const;
const ACTS = { q8_0: [8, 32, 34], q8_1: [9, 32, 36], q8_K: [15, 256, 292] } as const;

const ggml = dlopen(ggmlPath, {
  ggml_cpu_init: sym([]),
  ...Object.fromEntries(WEIGHTS.flatMap(([t, , a]) => [
    [`quantize_row_${t}`, sym([P, P, I64])],
    [`ggml_vec_dot_${t}_${a}`, sym([I32, P, U64, P, U64, P, U64, I32])],
  ])),
  ...Object.fromEntries(Object.keys(ACTS).map((a) => [`quantize_row_${a}`, sym([P, P, I64])])),
} as Record<string, { args: FFIType[]; returns: FFIType }>).symbols as Record<string, (...a: unknown[]) => unknown>;
ggml.ggml_cpu_init!(); // fills the tables its kernels read (F16, E8M0)

const tmp = mkdtempSync(join(tmpdir(), "velo-ck-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const src = join(repo, "swift", "Sources", "CKernels");
const ckPath = join(tmp, "libck.so");
// the compiler the library is built with (Debian's swiftlang keeps its clang off PATH), else cc
const compiler = ["clang", "/usr/libexec/swift/bin/clang", "/usr/bin/clang"].find((c) => Bun.which(c)) ?? "cc";
const cc = Bun.spawnSync([compiler, "-O3", "-shared", "-fPIC", "-I", join(src, "include"), ...lib(src, /\.c$/), "-lm", "-o", ckPath], { stderr: "pipe" });
if (cc.exitCode !== 0) throw new Error(`cc could not build CKernels: ${cc.stderr.toString().slice(-2000)}`);
const ck = dlopen(ckPath, {
  ck_quantize_row: sym([I32, P, P, I64]),
  ck_dequantize_row: sym([I32, P, P, I64], I32),
  ck_vec_dot_type: sym([I32], I32),
  ck_vec_dot: sym([I32, I64, P, P], FFIType.f32),
  ck_matmul: sym([I32, I64, P, U64, I64, I64, P, U64, I64, P, I64]),
  ck_set_isa_limit: sym([I32]),
  ck_isa_name: sym([], FFIType.cstring),
}).symbols;

let seed = 12345;
const rnd = () => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
/** Activation-like rows: mostly small, a few large values (what sets a block's scale). */
function floats(n: number): Float32Array {
  const x = new Float32Array(n);
  for (let i = 0; i < n; i++) x[i] = (rnd() - 0.5) * 4 * (rnd() < 0.03 ? 12 : 1);
  return x;
}
const dequant = (type: number, bytes: Uint8Array, n: number) => {
  const y = new Float32Array(n);
  expect(ck.ck_dequantize_row(type, ptr(bytes), ptr(y), n)).toBe(1);
  return y;
};

const ROWS = 16, M = 5;
const levels: string[] = [];
for (let level = 0; level <= 3; level++) {
  ck.ck_set_isa_limit(level);
  const name = String(ck.ck_isa_name());
  if (!levels.includes(name)) levels.push(name);
}
ck.ck_set_isa_limit(3);

describe(`CPU kernels against llama.cpp's (${ggmlPath.split("/").pop()}), Velo at ${levels.join(", ")}`, () => {
  for (const [name, act] of Object.entries(ACTS)) {
    test(`activations: ${name} bytes identical`, () => {
      const [type, bs, bb] = act;
      const n = bs * 64, x = floats(n);
      const a = new Uint8Array((n / bs) * bb), b = new Uint8Array(a.length);
      ggml[`quantize_row_${name}`]!(ptr(x), ptr(a), n);
      for (let level = 0; level <= 3; level++) {
        ck.ck_set_isa_limit(level);
        b.fill(0);
        ck.ck_quantize_row(type, ptr(x), ptr(b), n);
        const diff = a.findIndex((v, i) => v !== b[i]);
        expect(diff < 0 ? "identical" : `${ck.ck_isa_name()}: first difference at byte ${diff} of ${a.length}`).toBe("identical");
      }
      ck.ck_set_isa_limit(3);
    });
  }

  for (const [name, type, actName, bs, bb] of WEIGHTS) {
    test(`${name} × ${actName}`, () => {
      const [actType, abs, ab] = ACTS[actName];
      expect(ck.ck_vec_dot_type(type)).toBe(actType);
      // a length with a tail past the last 256 for the 32-blocks; a few 256-blocks for the K-quants
      for (const n of bs === 32 ? [2880, 96] : [2816, 256]) {
        const wRow = (n / bs) * bb, aRow = (n / abs) * ab;
        const w = new Uint8Array(ROWS * wRow), a = new Uint8Array(M * aRow);
        for (let r = 0; r < ROWS; r++) ggml[`quantize_row_${name}`]!(ptr(floats(n)), ptr(w.subarray(r * wRow)), n);
        for (let m = 0; m < M; m++) ggml[`quantize_row_${actName}`]!(ptr(floats(n)), ptr(a.subarray(m * aRow)), n);
        // llama.cpp's products, and each one's Σ|w·a| (what float rounding of it is relative to)
        const ref = new Float32Array(ROWS * M), scale = new Float64Array(ROWS * M), s = new Float32Array(1);
        for (let r = 0; r < ROWS; r++) {
          const wf = dequant(type, w.subarray(r * wRow, (r + 1) * wRow), n);
          for (let m = 0; m < M; m++) {
            ggml[`ggml_vec_dot_${name}_${actName}`]!(n, ptr(s), 0, ptr(w.subarray(r * wRow)), 0, ptr(a.subarray(m * aRow)), 0, 1);
            ref[m * ROWS + r] = s[0]!;
            const af = dequant(actType, a.subarray(m * aRow, (m + 1) * aRow), n);
            let sum = 0;
            for (let i = 0; i < n; i++) sum += Math.abs(wf[i]! * af[i]!);
            scale[m * ROWS + r] = sum;
          }
        }
        for (let level = 0; level <= 3; level++) {
          ck.ck_set_isa_limit(level);
          const isa = ck.ck_isa_name();
          const tiles = new Float32Array(ROWS * M);
          ck.ck_matmul(type, n, ptr(w), wRow, 0, ROWS, ptr(a), aRow, M, ptr(tiles), ROWS);
          for (let r = 0; r < ROWS; r++) {
            for (let m = 0; m < M; m++) {
              const i = m * ROWS + r, tol = 1e-5 * scale[i]!;
              const one = Number(ck.ck_vec_dot(type, n, ptr(w.subarray(r * wRow)), ptr(a.subarray(m * aRow))));
              for (const [how, got] of [["ck_vec_dot", one], ["ck_matmul", tiles[i]!]] as const) {
                if (!(Math.abs(got - ref[i]!) <= tol)) {
                  throw new Error(`${name} n=${n} ${isa} ${how}: row ${r} × activation ${m} = ${got}, llama.cpp ${ref[i]} (Σ|w·a| ${scale[i]!.toExponential(3)})`);
                }
              }
            }
          }
        }
        ck.ck_set_isa_limit(3);
      }
    });
  }
});
