import { Engine, type EngineOptions } from "../src/engine/engine";
import { Model } from "../src/engine/model";
import type { EngineFlags } from "./options";
import { requireModelPath } from "./options";
import { chalkStderr } from "chalk";
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

/** Opens a model and starts its engine, with a spinner on a terminal. */
export function loadEngine(path: string | undefined, flags: EngineFlags, extra: EngineOptions = {}): Loaded {
  const file = requireModelPath(path);
  const spin = spinner(`loading ${file}`).start();
  const t0 = performance.now();
  let model: Model | undefined;
  let draft: Model | undefined;
  try {
    model = Model.open(file);
    if (flags.spec === "draft" && !flags.draft) throw new CliError("--spec draft needs --draft MODEL", 2);
    if (flags.draft) draft = Model.open(requireModelPath(flags.draft));
    const engine = Engine.create(
      model,
      {
        threads: flags.threads,
        backend: flags.backend,
        device: flags.device,
        // absent: the model's trained context, shortened to what fits the device
        ctxSize: flags.ctxSize,
        prefixCache: flags.prefixCache,
        memoryBudgetMb: flags.memoryBudget,
        cacheTypeK: flags.cacheTypeK,
        cacheTypeV: flags.cacheTypeV,
        speculation: flags.spec ?? (flags.draft ? "draft" : "off"),
        draftMax: flags.draftMax,
        draftAdaptive: flags.specAdapt,
        ...extra,
      },
      draft,
    );
    const loadMs = performance.now() - t0;
    spin.succeed(`loaded ${model.info().name ?? file}${draft ? ` with draft ${flags.draft}` : ""} in ${(loadMs / 1000).toFixed(2)} s`);
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
