// Batched greedy decode under sets of switches against the first set: B sequences submitted at
// once (so they decode as one B-row batch), each with its own pseudo-random prompt, and each
// set's tokens and top logits compared with the first's. Kernel changes that should leave the
// numbers alone (a dispatch joined into another, the same sums in the same order) must give
// identical tokens and a max |Δlogit| of 0.
// --stagger N submits each sequence once the one before has N tokens, so its prompt is
// prefilled in a step beside the others' decode tokens (attention_cm2 takes such a prompt chunk
// when it is at least 64 tokens; VELO_GPU_NO_CM2_ATTN=1 is the set to compare it with).
//   bun bench/gpu/batch-check.ts MODEL.gguf [--batch 16] [--prompt 24] [--gen 32] [--stagger N] [--backend vulkan] SET...
// SET: assignments joined by '+' ('-' is none), e.g. - VELO_GPU_SPLIT_SUM=dispatch VELO_LIB=/x/libVelo.so
import { parseArgs } from "node:util";
import { Engine } from "../../src/engine/engine";
import { Model } from "../../src/engine/model";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    child: { type: "boolean", default: false }, batch: { type: "string", default: "16" },
    prompt: { type: "string", default: "24" }, gen: { type: "string", default: "32" }, backend: { type: "string", default: "vulkan" },
    stagger: { type: "string", default: "0" },
  },
});
const B = Number(values.batch), P = Number(values.prompt), G = Number(values.gen), STAGGER = Number(values.stagger), TOP = 8;
type Seq = { tokens: number[]; top: [number, number][][] };

async function child(file: string): Promise<Seq[]> {
  const m = Model.open(file);
  const e = Engine.create(m, { backend: values.backend as "vulkan", ctxSize: 512, maxBatchSize: B });
  try {
    e.waitForKernels();
    let s = 12345;
    const vocab = Math.min(m.info().tokenizer?.vocab_size ?? 30000, 30000);
    const prompts = Array.from({ length: B }, () => Array.from({ length: P }, () => (s = (s * 1103515245 + 12345) >>> 0) % vocab));
    const runs: Promise<Seq>[] = [];
    for (const prompt of prompts) {
      let started!: () => void;
      const enough = new Promise<void>((r) => (started = r));
      runs.push((async () => {
        const g = e.submit({ promptTokens: prompt, maxTokens: G, temperature: 0, ignoreEos: true, topLogits: TOP });
        const seq: Seq = { tokens: [], top: [] };
        for await (const c of g) {
          seq.tokens.push(...c.tokens);
          if (c.top_logits) seq.top.push(c.top_logits);
          if (seq.tokens.length >= STAGGER) started();
        }
        started();
        await g.finished;
        return seq;
      })());
      if (STAGGER > 0) await enough;
    }
    return await Promise.all(runs);
  } finally {
    e.close();
    m.close();
  }
}

if (values.child) {
  console.log(JSON.stringify(await child(positionals[0]!)));
  process.exit(0);
}

const [file, ...sets] = positionals;
if (!file || !sets.length) throw new Error("usage: batch-check.ts MODEL.gguf [--batch N] [--prompt N] [--gen N] SET...");
function run(set: string): Seq[] {
  const env = { ...process.env } as Record<string, string>;
  if (set !== "-") for (const a of set.split("+")) env[a.slice(0, a.indexOf("="))] = a.slice(a.indexOf("=") + 1);
  const r = Bun.spawnSync([process.execPath, import.meta.path, "--child", "--batch", String(B), "--prompt", String(P),
    "--gen", String(G), "--stagger", String(STAGGER), "--backend", values.backend!, file], { env, stderr: "inherit" });
  if (r.exitCode !== 0) throw new Error(`set ${set}: exit ${r.exitCode}`);
  return JSON.parse(r.stdout.toString().trim().split("\n").pop()!) as Seq[];
}

const ref = run(sets[0]!);
console.log(`${sets[0]}: reference, ${B} sequences of ${P} + ${G} tokens`);
let bad = 0;
for (const set of sets.slice(1)) {
  const r = run(set);
  let same = 0, maxDiff = 0;
  const each: string[] = [];
  for (let i = 0; i < B; i++) {
    const a = ref[i]!, b = r[i]!;
    let k = 0, diff = 0;
    while (k < a.tokens.length && a.tokens[k] === b.tokens[k]) k++;
    if (k === a.tokens.length && b.tokens.length === k) same++;
    // top logits of the steps before the sequences part, matched by id
    for (let t = 0; t < Math.min(k + 1, a.top.length, b.top.length); t++) {
      const mb = new Map(b.top[t]);
      for (const [id, l] of a.top[t]!) if (mb.has(id)) diff = Math.max(diff, Math.abs(l - mb.get(id)!));
    }
    maxDiff = Math.max(maxDiff, diff);
    each.push(diff.toExponential(1));
  }
  console.log(`${set}: ${same}/${B} sequences identical, max |Δlogit| ${maxDiff.toExponential(2)} (by sequence: ${each.join(" ")})`);
  if (same !== B) bad++;
}
process.exit(bad ? 1 : 0);
