// Progress on stderr: a bar that redraws in place on a terminal (bytes, rate, ETA), and plain
// lines otherwise (at most one per step of 10 % or per 10 s, so logs stay short).
import { chalkStderr } from "chalk";

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n / 1024, i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

export function formatDuration(s: number): string {
  if (!Number.isFinite(s) || s < 0) return "?";
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

export interface ProgressOptions {
  /** What is being done, e.g. "pulling x.gguf". */
  label: string;
  /** Total bytes, when known. */
  total?: number;
  /** Bytes already there before this run (a resumed download): counted as done, not in the rate. */
  start?: number;
  /** Force the terminal bar on or off (default: whether stderr is a terminal). */
  tty?: boolean;
  stream?: NodeJS.WriteStream;
}

export class ProgressBar {
  private done: number;
  private readonly t0 = performance.now();
  private lastDraw = -Infinity;
  private lastLineStep = -1;
  private lastLineAt = 0;
  private readonly tty: boolean;
  private readonly stream: NodeJS.WriteStream;
  private finished = false;

  constructor(private readonly o: ProgressOptions) {
    this.done = o.start ?? 0;
    this.stream = o.stream ?? process.stderr;
    this.tty = o.tty ?? this.stream.isTTY === true;
    if (!this.tty) {
      const from = o.start ? `, resuming at ${formatBytes(o.start)}` : "";
      this.stream.write(`${o.label}: ${o.total !== undefined ? formatBytes(o.total) : "size unknown"}${from}\n`);
    }
  }

  get bytes(): number {
    return this.done;
  }

  /** Bytes per second since this run started. */
  rate(): number {
    const s = (performance.now() - this.t0) / 1000;
    return s > 0 ? (this.done - (this.o.start ?? 0)) / s : 0;
  }

  update(bytes: number) {
    this.done = bytes;
    const now = performance.now();
    if (this.tty) {
      if (now - this.lastDraw < 100) return;
      this.lastDraw = now;
      this.stream.write("\r" + this.line() + "\x1b[K");
      return;
    }
    const total = this.o.total;
    const step = total ? Math.floor((bytes / total) * 10) : -1;
    if ((total && step > this.lastLineStep && step < 10) || now - this.lastLineAt > 10_000) {
      this.lastLineStep = step;
      this.lastLineAt = now;
      if (step > 0 || !total) this.stream.write(`${this.o.label}: ${this.line(false)}\n`);
    }
  }

  add(n: number) {
    this.update(this.done + n);
  }

  /** The status text: percentage, bar, bytes, rate, ETA. */
  line(bar = true): string {
    const { total } = this.o;
    const rate = this.rate();
    const parts: string[] = [];
    if (total) {
      const frac = Math.min(1, this.done / total);
      parts.push(`${(frac * 100).toFixed(0).padStart(3)}%`);
      if (bar) {
        const w = 24, full = Math.round(frac * w);
        parts.push(chalkStderr.cyan("█".repeat(full)) + chalkStderr.dim("░".repeat(w - full)));
      }
      parts.push(`${formatBytes(this.done)} / ${formatBytes(total)}`);
    } else {
      parts.push(formatBytes(this.done));
    }
    parts.push(`${formatBytes(rate)}/s`);
    if (total && rate > 0) parts.push(`ETA ${formatDuration((total - this.done) / rate)}`);
    return (bar ? `${this.o.label} ` : "") + parts.join("  ");
  }

  /** Ends the bar with a final line (also on non-terminals). */
  finish(message: string) {
    if (this.finished) return;
    this.finished = true;
    this.stream.write((this.tty ? "\r\x1b[K" : "") + message + "\n");
  }

  /** Clears the bar without a message (an error follows). */
  stop() {
    if (this.finished) return;
    this.finished = true;
    if (this.tty) this.stream.write("\r\x1b[K");
  }
}
