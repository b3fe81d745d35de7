import { Engine } from "../../src/engine/engine";
import { Model } from "../../src/engine/model";
import { isAbsolute } from "node:path";
import { testData } from "./paths";

type Options = NonNullable<Parameters<typeof Engine.create>[1]>;

/**
 * Opens a test-data model (or a file at an absolute path), starts an engine on it, runs `body`,
 * and closes both. Without a backend in `opts`, VELO_BACKEND picks one, as it does for the CLI
 * (the macOS workflow's CPU step sets it to cpu).
 */
export function withEngine<T>(file: string, opts: Options, body: (e: Engine, m: Model) => Promise<T>): Promise<T> {
  const m = Model.open(isAbsolute(file) ? file : testData(file));
  const env = process.env.VELO_BACKEND as Options["backend"] | undefined;
  const e = Engine.create(m, opts.backend === undefined && env ? { ...opts, backend: env } : opts);
  return body(e, m).finally(() => {
    e.close();
    m.close();
  });
}
