import { join } from "node:path";
import { repoRoot } from "./paths";

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI (cli/index.ts) in a child Bun process, as a user would. */
export async function runCli(args: string[], opts: { stdin?: string; env?: Record<string, string> } = {}): Promise<CliResult> {
  const proc = Bun.spawn([process.execPath, join(repoRoot, "cli", "index.ts"), ...args], {
    stdin: opts.stdin === undefined ? "ignore" : new TextEncoder().encode(opts.stdin),
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, NO_COLOR: "1", ...opts.env },
  });
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  return { code, stdout, stderr };
}
