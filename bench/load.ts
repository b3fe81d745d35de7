// Load and faults (issue 19, item 4): CLIENTS concurrent streaming clients against
// `velo serve --max-batch-size 8`, for ROUNDS requests each, with random disconnects (the
// client aborts mid-stream), random cancellations before the first byte and random short client
// timeouts. Every request must be served ([DONE]) or refused with 503 + Retry-After, or be one
// the client itself gave up; none may hang; afterwards /metrics must show 0 running sequences,
// 0 queued and no KV page held outside the prefix cache.
//
//   scripts/toolchain.sh run node_modules/bun/bin/bun.exe bench/load.ts [CLIENTS] [ROUNDS] [MODEL]
import { testData } from "../tests/helpers/paths";
import { startServer } from "../tests/helpers/server";

const clients = Number(process.argv[2] ?? 64);
const rounds = Number(process.argv[3] ?? 4);
const modelFile = process.argv[4] ?? testData("stories260K.gguf");
const server = await startServer([modelFile, "--max-batch-size", "8", "--max-queue", "24", "--ctx-size", "256"]);
const model = (await (await fetch(`${server.url}/v1/models`)).json()).data[0].id;

let seed = 42;
const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
const counts = { served: 0, refused503: 0, refusedWithoutRetryAfter: 0, disconnected: 0, cancelledEarly: 0, timedOut: 0, otherStatus: 0, incomplete: 0, hung: 0 };

async function one(): Promise<void> {
  const fault = rand();
  const ctl = new AbortController();
  // 20 %: disconnect mid-stream; 10 %: cancel before the answer; 10 %: a client timeout of 50-500 ms
  const kind = fault < 0.2 ? "disconnect" : fault < 0.3 ? "cancel" : fault < 0.4 ? "timeout" : "normal";
  if (kind === "cancel") setTimeout(() => ctl.abort(), rand() * 20);
  if (kind === "timeout") setTimeout(() => ctl.abort(), 50 + rand() * 450);
  const hang = setTimeout(() => {
    counts.hung++;
    ctl.abort();
  }, 120_000);
  try {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model, stream: true, max_tokens: 16 + Math.floor(rand() * 180), temperature: 0.8, seed: Math.floor(rand() * 1e6),
        messages: [{ role: "user", content: `Tell story ${Math.floor(rand() * 5)}` }] }),
      signal: ctl.signal,
    });
    if (res.status === 503) {
      counts.refused503++;
      if (!res.headers.get("retry-after")) counts.refusedWithoutRetryAfter++;
      await res.text();
      return;
    }
    if (res.status !== 200) {
      counts.otherStatus++;
      await res.text();
      return;
    }
    const reader = res.body!.getReader();
    const stopAfter = kind === "disconnect" ? 1 + Math.floor(rand() * 10) : Infinity;
    let text = "";
    let chunks = 0;
    while (true) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
      if (++chunks >= stopAfter) {
        ctl.abort();
        counts.disconnected++;
        return;
      }
    }
    if (text.includes("data: [DONE]")) counts.served++;
    else counts.incomplete++;
  } catch (e) {
    if (kind === "cancel") counts.cancelledEarly++;
    else if (kind === "timeout") counts.timedOut++;
    else if (kind === "disconnect") counts.disconnected++;
    else throw e;
  } finally {
    clearTimeout(hang);
  }
}

async function metric(name: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  return Number(text.match(new RegExp(`^${name} ([\\d.e+-]+)$`, "m"))?.[1] ?? NaN);
}

const t0 = performance.now();
const rss: number[] = [];
const sampler = setInterval(() => {
  try {
    const status = require("node:fs").readFileSync(`/proc/${server.proc.pid}/status`, "utf8");
    rss.push(Number(status.match(/VmRSS:\s+(\d+)/)?.[1] ?? 0) / 1024);
  } catch {}
}, 1000);
await Promise.all(Array.from({ length: clients }, async () => {
  for (let r = 0; r < rounds; r++) await one();
}));
const seconds = (performance.now() - t0) / 1000;
// cancellations land at the next engine step: give them a moment
let running = NaN, queued = NaN, used = NaN, cached = NaN;
for (let i = 0; i < 50; i++) {
  [running, queued, used, cached] = await Promise.all(["velo_running_sequences", "velo_queue_depth", "velo_kv_pages_used", "velo_prefix_cache_pages"].map(metric));
  if (running === 0 && queued === 0) break;
  await Bun.sleep(100);
}
clearInterval(sampler);
const alive = (await fetch(`${server.url}/health`)).status === 200;
const summary = {
  clients, rounds, requests: clients * rounds, seconds: Number(seconds.toFixed(1)), ...counts,
  after: { running_sequences: running, queue_depth: queued, kv_pages_used: used, prefix_cache_pages: cached, health_ok: alive },
  rss_mib: { first: Math.round(rss[0] ?? 0), max: Math.round(Math.max(...rss, 0)), last: Math.round(rss.at(-1) ?? 0) },
};
console.log(JSON.stringify(summary, null, 2));
server.proc.kill();
const ok = alive && running === 0 && queued === 0 && counts.hung === 0 && counts.otherStatus === 0 && counts.incomplete === 0 && counts.refusedWithoutRetryAfter === 0;
process.exit(ok ? 0 : 1);
