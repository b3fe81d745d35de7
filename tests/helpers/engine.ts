import { Engine } from "../../src/engine/engine";
import { Model } from "../../src/engine/model";
import { isAbsolute } from "node:path";
import { testData } from "./paths";

/** Opens a shared model (or a file at an absolute path), starts an engine on it, runs `body`, and closes both. */
export function withEngine<T>(file: string, opts: Parameters<typeof Engine.create>[1], body: (e: Engine, m: Model) => Promise<T>): Promise<T> {
  const m = Model.open(isAbsolute(file) ? file : testData(file));
  const e = Engine.create(m, opts);
  return body(e, m).finally(() => {
    e.close();
    m.close();
  });
}
