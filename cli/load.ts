import { statSync } from "node:fs";
import { totalmem } from "node:os";
import { basename } from "node:path";
import { Engine, type EngineOptions } from "../src/engine/engine";
import { Model } from "../src/engine/model";
import { type EngineFlags, engineOptions, requireModelPath } from "./options";
import { chalkStderr } from "chalk";
import { formatBytes, ProgressBar } from "./progress";
import { CliError, spinner } from "./ui";

/**
 * The memory plan at load: on a terminal one line (`weights 4.2 GiB + KV 2.0 GiB (f16, 8 × 4096)
 * + scratch 0.3 GiB on <device>`); anything the engine changed to fit (a shorter context, a
 * smaller batch, the CPU instead of the GPU) always, since it changes what the command does.
 */
export function reportPlan(engine: Engine, always = false): void {
  const plan = engine.stats().memory;
  if (!plan) return;
  if (always || process.stderr.isTTY) process.stderr.write(chalkStderr.dim(plan.summary) + "\n");
  for (const note of plan.notes) process.stderr.write(chalkStderr.yellow(`velo: ${note}`) + "\n");
}

export interface Loaded {
  model: Model;
  engine: Engine;
  loadMs: number;
  draft?: Model;
  /** Closes the engine and the models. */
  close(): void;
}

/** Files at least this big get a load progress bar on a terminal, and one line otherwise. */
export const LOAD_REPORT_BYTES = 64 * 2 ** 20;

/** Bytes mapped at a time while pages are touched (a typed array stays under 4 GiB). */
const TOUCH_PIECE = 2 ** 30;
/** Bytes between touched bytes: the smallest page size (Apple Silicon's are 16 KiB). */
const TOUCH_STEP = 4096;
/** Bytes between progress reports. */
const TOUCH_REPORT = 64 * 2 ** 20;

/**
 * Brings a file's pages into the page cache without copying them: maps it a piece at a time
 * (`piece`, a multiple of the page size) and reads one byte a page, so a resident page costs a
 * page-table entry and a missing one is read from disk by its fault: 12 ms for a cached 1.5 GiB
 * file against 508 ms streaming it into JavaScript (bench/preread.ts). Calls `progress` with
 * the bytes done so far after each 64 MiB; returns the sum of the bytes it read, so the reads
 * cannot be optimised away.
 */
export function touchPages(file: string, progress?: (bytes: number) => void, piece = TOUCH_PIECE): number {
  const size = statSync(file).size;
  let sum = 0;
  for (let offset = 0; offset < size; offset += piece) {
    const m = Bun.mmap(file, { shared: false, offset, size: Math.min(piece, size - offset) });
    for (let at = 0; at < m.length; at += TOUCH_REPORT) {
      const end = Math.min(at + TOUCH_REPORT, m.length);
      for (let i = at; i < end; i += TOUCH_STEP) sum += m[i]!;
      progress?.(offset + end);
    }
  }
  return sum;
}

/**
 * Brings the model files into the page cache once, with a progress bar: the library maps the
 * file and its loads then find the pages resident. The library has no progress callback, so
 * this is the part of loading TypeScript can measure; opening the model and starting the engine
 * (the GPU upload) are one blocking call after it, shown as a line and the time it took.
 * Skipped for files that would not fit in half the memory (reading them would only evict
 * themselves) and for small ones.
 */
export function preread(files: string[], tty: boolean): void {
  const sizes = files.map((f) => statSync(f).size);
  const total = sizes.reduce((a, b) => a + b, 0);
  if (total < LOAD_REPORT_BYTES || total > totalmem() / 2) return;
  const label = `reading ${basename(files[0]!)}${files.length > 1 ? " and its draft" : ""}`;
  const bar = tty ? new ProgressBar({ label, total, tty }) : undefined;
  let before = 0;
  try {
    files.forEach((f, i) => {
      touchPages(f, (bytes) => bar?.update(before + bytes));
      before += sizes[i]!;
    });
  } catch {
    // a file that cannot be mapped: opening it reports why, as a clear error
  }
  bar?.stop();
}

/**
 * Opens a model and starts its engine. On a terminal: a progress bar while the file is read
 * (models of 64 MiB and more), then a line while the engine starts (the weights go to the GPU),
 * then the time each took. Elsewhere: one line for models of 64 MiB and more, nothing for small
 * ones (scripts that read stderr stay quiet).
 */
export async function loadEngine(path: string | undefined, flags: EngineFlags, extra: EngineOptions = {}): Promise<Loaded> {
  const file = requireModelPath(path);
  const draftFile = flags.draft ? requireModelPath(flags.draft) : undefined;
  const tty = process.stderr.isTTY === true;
  const bytes = statSync(file).size + (draftFile ? statSync(draftFile).size : 0);
  const t0 = performance.now();
  preread(draftFile ? [file, draftFile] : [file], tty);
  const tRead = performance.now();
  // the library call blocks the event loop: the spinner shows one frame until it returns
  const spin = spinner(`loading ${basename(file)} (${formatBytes(bytes)}): opening it and starting the engine${flags.backend === "vulkan" || flags.backend === "metal" ? " (uploading the weights to the GPU)" : ""}`).start();
  let model: Model | undefined;
  let draft: Model | undefined;
  try {
    model = Model.open(file);
    if (flags.spec === "draft" && !flags.draft) throw new CliError("--spec draft needs --draft MODEL", 2);
    if (draftFile) draft = Model.open(draftFile);
    if (flags.checkTensors) {
      model.checkTensors();
      draft?.checkTensors();
    }
    const engine = Engine.create(model, { ...engineOptions(flags), ...extra }, draft);
    const loadMs = performance.now() - t0;
    const backend = (engine.stats() as { backend?: string }).backend ?? "cpu";
    const phases = tRead - t0 > 50 ? ` (reading ${((tRead - t0) / 1000).toFixed(2)} s, engine on ${backend} ${((loadMs - (tRead - t0)) / 1000).toFixed(2)} s)` : ` on ${backend}`;
    const done = `loaded ${model.info().name ?? file}${draft ? ` with draft ${flags.draft}` : ""}, ${formatBytes(bytes)}, in ${(loadMs / 1000).toFixed(2)} s${phases}`;
    spin.succeed(done);
    if (!tty && bytes >= LOAD_REPORT_BYTES) process.stderr.write(`velo: ${done}\n`);
    reportPlan(engine);
    const m = model, d = draft;
    return { model: m, engine, loadMs, draft: d, close: () => { engine.close(); m.close(); d?.close(); } };
  } catch (e) {
    spin.stop();
    model?.close();
    draft?.close();
    throw e;
  }
}
