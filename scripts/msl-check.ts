// msl-check.ts — checks the Metal kernels spirv-cross generated (gen/metal/*.metal) before they go
// into velo.metallib; `make shaders` runs it on every machine, so Linux builds check the MSL too.
//   bun scripts/msl-check.ts FILE.metal...
//
// For each file:
// - one kernel function, named after the file (the name MetalDevice looks up);
// - threadgroup memory within Apple GPUs' 32 KiB (MTLDevice.maxThreadgroupMemoryLength is
//   32768 on every Apple GPU family): the sum of the kernel's `threadgroup` variables, each
//   rounded up to 16 bytes, with array sizes evaluated from the file's own constants
//   (spirv-cross's SPIRV_CROSS_CONSTANT_ID_n macros as the file defines them);
// - constant 0 (threads per group) is a Metal function constant, so the host's value takes
//   effect, and no other constant is one: MetalDevice sets only constant 0, the others are
//   baked into each function (shaders/README.md, "Metal").
// Prints one line per kernel; exits 1 on any failure.
import { readFileSync } from "node:fs";
import { basename } from "node:path";

export const THREADGROUP_LIMIT = 32768;

const SCALARS: Record<string, number> = {
  char: 1, uchar: 1, bool: 1, short: 2, ushort: 2, half: 2, int: 4, uint: 4, float: 4, long: 8, ulong: 8,
};

/** Bytes of an MSL type as spirv-cross writes it: scalars, vectors (3-vectors take 4 slots), spvUnsafeArray<T, N>. */
function typeBytes(type: string, value: (expr: string) => number): number {
  const t = type.replace(/\s+/g, " ").trim();
  const arr = /^spvUnsafeArray<(.+), ([^,<>]+)>$/.exec(t);
  if (arr) return typeBytes(arr[1]!, value) * value(arr[2]!);
  const vec = /^(char|uchar|bool|short|ushort|half|int|uint|float|long|ulong)([234])$/.exec(t);
  if (vec) return SCALARS[vec[1]!]! * (vec[2] === "3" ? 4 : Number(vec[2]));
  const mat = /^(half|float)([234])x([234])$/.exec(t);
  if (mat) return SCALARS[mat[1]!]! * (mat[3] === "3" ? 4 : Number(mat[3])) * Number(mat[2]);
  if (t in SCALARS) return SCALARS[t]!;
  throw new Error(`unknown threadgroup type "${t}"`);
}

/** Integer expressions of spirv-cross's program-scope constants: literals (1u), names, + - * / % << >> & | ( ). */
function evaluate(expr: string, names: Map<string, number | string>): number {
  const tokens = expr.match(/\d+u?|[A-Za-z_]\w*|<<|>>|[-+*/%&|()]/g) ?? [];
  if (tokens.join("").replace(/\s/g, "") !== expr.replace(/\s/g, "")) throw new Error(`cannot evaluate "${expr}"`);
  let i = 0;
  const prec: Record<string, number> = { "|": 1, "&": 2, "<<": 3, ">>": 3, "+": 4, "-": 4, "*": 5, "/": 5, "%": 5 };
  const primary = (): number => {
    const t = tokens[i++];
    if (t === undefined) throw new Error(`cannot evaluate "${expr}"`);
    if (t === "(") {
      const v = binary(0);
      if (tokens[i++] !== ")") throw new Error(`unbalanced "${expr}"`);
      return v;
    }
    if (t === "-") return -primary();
    if (/^\d/.test(t)) return Number(t.replace(/u$/, ""));
    const v = names.get(t);
    if (typeof v === "number") return v;
    throw new Error(v ?? `"${t}" is not a compile-time constant here`);
  };
  const binary = (min: number): number => {
    let left = primary();
    for (;;) {
      const op = tokens[i];
      if (op === undefined || !(op in prec) || prec[op]! < min) return left;
      i++;
      const right = binary(prec[op]! + 1);
      switch (op) {
        case "+": left += right; break;
        case "-": left -= right; break;
        case "*": left *= right; break;
        case "/": left = Math.trunc(left / right); break;
        case "%": left %= right; break;
        case "<<": left <<= right; break;
        case ">>": left >>>= right; break;
        case "&": left &= right; break;
        case "|": left |= right; break;
      }
    }
  };
  const v = binary(0);
  if (i !== tokens.length) throw new Error(`cannot evaluate "${expr}"`);
  return v;
}

export interface KernelReport { name: string; threadgroupBytes: number; problems: string[] }

export function checkMSL(file: string, text: string): KernelReport {
  const name = basename(file, ".metal");
  const problems: string[] = [];
  const names = new Map<string, number | string>();
  const functionConstants = new Set<number>();
  for (const line of text.split("\n")) {
    let m = /^#define (SPIRV_CROSS_CONSTANT_ID_\d+) (\S+)/.exec(line);
    if (m) {
      if (!names.has(m[1]!)) names.set(m[1]!, Number(m[2]!.replace(/u$/, ""))); // #ifndef: the first definition wins
      continue;
    }
    m = /^constant \w+ (\w+) \[\[function_constant\((\d+)\)\]\];/.exec(line);
    if (m) {
      functionConstants.add(Number(m[2]));
      names.set(m[1]!, `${m[1]} is function constant ${m[2]}, set when the pipeline is made: it cannot size threadgroup memory`);
      continue;
    }
    m = /^constant \w+ (\w+)(?: \[\[maybe_unused\]\])? = (.*);$/.exec(line);
    if (m) {
      try {
        names.set(m[1]!, evaluate(m[2]!, names));
      } catch (e) {
        names.set(m[1]!, `${m[1]} = ${m[2]} (${(e as Error).message})`);
      }
    }
  }
  const kernels = [...text.matchAll(/^kernel void (\w+)\(/gm)].map((k) => k[1]!);
  if (kernels.length !== 1 || kernels[0] !== name) problems.push(`expected one kernel named ${name}, found ${kernels.join(", ") || "none"}`);
  if (!functionConstants.has(0)) problems.push("constant 0 (threads per group) is not a Metal function constant: the host's value would be ignored");
  for (const c of functionConstants) if (c !== 0) problems.push(`constant ${c} is a Metal function constant, which MetalDevice never sets (it bakes constants after 0 into the function name)`);
  if (/\[\[threadgroup\(\d+\)\]\]/.test(text)) problems.push("a threadgroup buffer argument: MetalDevice never sets threadgroup memory lengths");

  let bytes = 0;
  const value = (expr: string) => evaluate(expr, names);
  for (const m of text.matchAll(/^\s*threadgroup\s+([^;()]+?)\s+(\w+)((?:\[[^\]]+\])*)\s*;/gm)) {
    try {
      let b = typeBytes(m[1]!, value);
      for (const dim of m[3]!.matchAll(/\[([^\]]+)\]/g)) b *= value(dim[1]!);
      bytes += Math.ceil(b / 16) * 16;
    } catch (e) {
      problems.push(`threadgroup ${m[2]}: ${(e as Error).message}`);
    }
  }
  if (bytes > THREADGROUP_LIMIT) problems.push(`${bytes} bytes of threadgroup memory, over Apple GPUs' ${THREADGROUP_LIMIT}`);
  return { name, threadgroupBytes: bytes, problems };
}

if (import.meta.main) {
  const files = process.argv.slice(2);
  if (!files.length) {
    console.error("usage: bun scripts/msl-check.ts FILE.metal...");
    process.exit(2);
  }
  let bad = 0, most = { name: "", threadgroupBytes: 0 };
  for (const f of files) {
    const r = checkMSL(f, readFileSync(f, "utf8"));
    if (r.threadgroupBytes > most.threadgroupBytes) most = r;
    if (r.problems.length) {
      bad++;
      for (const p of r.problems) console.error(`msl-check: ${f}: ${p}`);
    }
  }
  console.log(`msl-check: ${files.length} Metal kernels, ${bad} with problems; most threadgroup memory: ${most.name} ${most.threadgroupBytes} of ${THREADGROUP_LIMIT} bytes`);
  process.exit(bad ? 1 : 0);
}
