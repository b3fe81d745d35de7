// Soak (issue 19, item 4): MINUTES of steady load on `velo serve` (CLIENTS streaming clients,
// one in five disconnecting mid-stream), the server's resident memory recorded every minute.
// After warm-up the curve should be flat; afterwards nothing may be left running.
//
//   scripts/toolchain.sh run node_modules/bun/bin/bun.exe bench/soak.ts [MINUTES=30] [CLIENTS=16] [MODEL]
import { readFileSync } from "node:fs";
import { testData } from "../tests/helpers/paths";
import { startServer } from "../tests/helpers/server";

const minutes = Number(process.argv[2] ?? 30);
const clients = Number(process.argv[3] ?? 16);
const modelFile = process.argv[4] ?? testData("stories260K.gguf");
const server = await startServer([modelFile, "--max-batch-size", "8", "--max-queue", "64", "--ctx-size", "256"]);
const model = (await (await fetch(`${server.url}/v1/models`)).json()).data[0].id;
const rssMiB = () => Number(readFileSync(`/proc/${server.proc.pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/)?.[1] ?? 0) / 1024;

let seed = 7;
const rand = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff);
const end = performance.now() + minutes * 60_000;
const counts = { requests: 0, served: 0, disconnected: 0, refused503: 0, errors: 0 };

async function client(): Promise<void> {
  while (performance.now() < end) {
    counts.requests++;
    const ctl = new AbortController();
    try {
      const res = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ model, stream: true, max_tokens: 16 + Math.floor(rand() * 200), seed: Math.floor(rand() * 1e6),
          messages: [{ role: "user", content: `Story number ${Math.floor(rand() * 1000)}` }] }),
        signal: ctl.signal,
      });
      if (res.status === 503) {
        counts.refused503++;
        await res.text();
        await Bun.sleep(100);
        continue;
      }
      const disconnect = rand() < 0.2;
      const reader = res.body!.getReader();
      let n = 0;
      while (true) {
        const { done } = await reader.read();
        if (done) break;
        if (disconnect && ++n > 3) {
          ctl.abort();
          break;
        }
      }
      if (disconnect) counts.disconnected++;
      else counts.served++;
    } catch {
      if (!ctl.signal.aborted) counts.errors++;
    }
  }
}

const curve: { minute: number; rss_mib: number; requests: number }[] = [{ minute: 0, rss_mib: Math.round(rssMiB()), requests: 0 }];
const sampler = setInterval(() => {
  curve.push({ minute: curve.length, rss_mib: Math.round(rssMiB()), requests: counts.requests });
  console.error(`minute ${curve.length - 1}: RSS ${curve.at(-1)!.rss_mib} MiB, ${counts.requests} requests`);
}, 60_000);
await Promise.all(Array.from({ length: clients }, client));
clearInterval(sampler);
await Bun.sleep(500);
const m = await (await fetch(`${server.url}/metrics`)).text();
const metric = (name: string) => Number(m.match(new RegExp(`^${name} ([\\d.e+-]+)$`, "m"))?.[1] ?? NaN);
console.log(JSON.stringify({ minutes, clients, ...counts, curve, after: { running_sequences: metric("velo_running_sequences"), queue_depth: metric("velo_queue_depth"), kv_pages_used: metric("velo_kv_pages_used") } }, null, 2));
server.proc.kill();
