// Engine options are defined once (src/engine/options.ts): every key the TypeScript side can
// send is one the library reads, and the reverse, with the same types and bounds; unknown keys
// are refused by name; each option reaches the engine.
import { describe, expect, test } from "bun:test";
import { Engine, engineOptionsJSON, type EngineOptions } from "../src/engine/engine";
import { check } from "../src/engine/errors";
import { Model } from "../src/engine/model";
import { engineOptionTable } from "../src/engine/options";
import { cstr, lib } from "../src/ffi/library";
import { testData } from "./helpers/paths";

describe("engine options", () => {
  test("the keys TypeScript sends are the keys the library accepts, and the reverse", () => {
    const sent = Object.keys(engineOptionsJSON({})).sort();
    const accepted = Engine.optionsSchema().map((o) => o.key).sort();
    expect(sent).toEqual(accepted);
    expect(sent).toContain("ctx_size");
    expect(sent).toContain("cache_type_k");
    expect(sent).toContain("memory_budget");
  });

  test("the table's types, bounds and choices are the library's", () => {
    const lib = new Map(Engine.optionsSchema().map((o) => [o.key, o]));
    for (const spec of engineOptionTable) {
      const l = lib.get(spec.key)!;
      expect({ key: spec.key, type: l.type }).toEqual({ key: spec.key, type: spec.type === "choice" ? "string" : spec.type });
      if (spec.type === "int") {
        // the same ceiling, and a floor the library takes (its own may be lower: 0 is "the default")
        expect({ key: spec.key, max: spec.max }).toEqual({ key: spec.key, max: l.max });
        expect({ key: spec.key, minTaken: spec.min! >= l.min! }).toEqual({ key: spec.key, minTaken: true });
      }
      if (spec.type === "choice") expect({ key: spec.key, choices: [...spec.choices!] }).toEqual({ key: spec.key, choices: l.choices! });
    }
  });

  test("a key the library does not know is refused by name", () => {
    const m = Model.open(testData("stories260K.gguf"));
    try {
      const out = new BigUint64Array(1);
      expect(() => check(lib().velo_engine_create(m.handle, null, cstr(JSON.stringify({ ctx_size: 64, context_len: 64 })), out)))
        .toThrow(/unknown engine option 'context_len' \(known: threads, ctx_size, /);
    } finally {
      m.close();
    }
  });

  test("every option reaches the engine", () => {
    const m = Model.open(testData("stories260K.gguf"));
    try {
      const opts: Required<Omit<EngineOptions, "kvMemory" | "device">> = {
        threads: 2, ctxSize: 96, maxBatchSize: 3, batchAuto: false, memoryBudget: 4096 * 2 ** 20, batchTokens: 40, kvPages: 30,
        pageSize: 8, cacheTypeK: "q8_0", cacheTypeV: "f32", prefixCache: false, profile: true, spec: "ngram", draftMax: 5,
        specAdapt: false, backend: "cpu",
      };
      // every key but two that exclude others (kv_memory: with kv_pages; device: a GPU)
      expect(Object.keys(opts).length).toBe(Object.keys(engineOptionsJSON({})).length - 2);
      const e = Engine.create(m, opts);
      try {
        const s = e.stats() as Record<string, unknown>;
        expect(s.threads).toBe(2);
        expect(s.context_size).toBe(96);
        expect(s.max_batch_size).toBe(3);
        expect(s.kv_pages_total).toBe(30);
        expect(s.page_size).toBe(8);
        expect([s.cache_type_k, s.cache_type_v]).toEqual(["q8_0", "f32"]);
        expect(s.prefix_cache_enabled).toBe(false);
        expect(s.speculation_mode).toBe("ngram");
        expect(s.backend).toBe("cpu");
        expect((s.memory as { free_bytes: number }).free_bytes).toBe(4096 * 2 ** 20);
      } finally {
        e.close();
      }
      // kv_memory instead of kv_pages: pages of 8 positions × 5 layers × (34 + 128) bytes
      const e2 = Engine.create(m, { ctxSize: 96, kvMemory: 2 ** 20, pageSize: 8, cacheTypeK: "q8_0", cacheTypeV: "f32" });
      try {
        expect(e2.stats().kv_pages_total).toBe(Math.floor((1 << 20) / (8 * 5 * (34 + 128))));
      } finally {
        e2.close();
      }
    } finally {
      m.close();
    }
  });
});
