import { Engine, type EngineOptions } from "../src/engine/engine";
import { Model } from "../src/engine/model";
import type { EngineFlags } from "./options";
import { requireModelPath } from "./options";
import { CliError, spinner } from "./ui";

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
    const trained = Number(model.info().metadata[`${model.info().architecture}.context_length`] ?? 4096);
    const engine = Engine.create(
      model,
      {
        threads: flags.threads,
        backend: flags.backend,
        device: flags.device,
        ctxSize: flags.ctxSize ?? Math.min(trained || 4096, 4096),
        prefixCache: flags.prefixCache,
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
    const m = model, d = draft;
    return { model: m, engine, loadMs, draft: d, close: () => { engine.close(); m.close(); d?.close(); } };
  } catch (e) {
    spin.stop();
    model?.close();
    draft?.close();
    throw e;
  }
}
