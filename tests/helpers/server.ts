import { join } from "node:path";
import { repoRoot } from "./paths";

export interface Running {
  proc: ReturnType<typeof Bun.spawn>;
  url: string;
}

/** Starts `velo serve` on a free port and waits for its "serving" line. */
export async function startServer(args: string[]): Promise<Running> {
  const proc = Bun.spawn([process.execPath, join(repoRoot, "cli", "index.ts"), "serve", ...args, "--port", "0"], {
    stdout: "ignore",
    stderr: "pipe",
    env: { ...process.env, NO_COLOR: "1" },
  });
  const reader = (proc.stderr as ReadableStream<Uint8Array>).getReader();
  let seen = "";
  const dec = new TextDecoder();
  while (true) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`server exited: ${seen}`);
    seen += dec.decode(value);
    const m = seen.match(/on (http:\/\/[\d.]+:\d+)/);
    if (m) {
      reader.releaseLock();
      return { proc, url: m[1]! };
    }
  }
}

/** POSTs JSON and returns the status and parsed body. */
export async function postJson(url: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}
