import { Engine, type EngineOptions } from "../src/engine/engine";
import { Model } from "../src/engine/model";
import type { EngineFlags } from "./options";
import { requireModelPath } from "./options";
import { spinner } from "./ui";

export interface Loaded {
  model: Model;
  engine: Engine;
  loadMs: number;
}

/** Opens a model and starts its engine, with a spinner on a terminal. */
export function loadEngine(path: string | undefined, flags: EngineFlags, extra: EngineOptions = {}): Loaded {
  const file = requireModelPath(path);
  const spin = spinner(`loading ${file}`).start();
  const t0 = performance.now();
  let model: Model | undefined;
  try {
    model = Model.open(file);
    const trained = Number(model.info().metadata[`${model.info().architecture}.context_length`] ?? 4096);
    const engine = Engine.create(model, {
      threads: flags.threads,
      ctxSize: flags.ctxSize ?? Math.min(trained || 4096, 4096),
      prefixCache: flags.prefixCache,
      ...extra,
    });
    const loadMs = performance.now() - t0;
    spin.succeed(`loaded ${model.info().name ?? file} in ${(loadMs / 1000).toFixed(2)} s`);
    return { model, engine, loadMs };
  } catch (e) {
    spin.stop();
    model?.close();
    throw e;
  }
}
