// The prebuilt CPU llama.cpp (node-llama-cpp) as the reference runners load it: never built or
// downloaded, its log on stderr (stdout is for the runners' JSON).
import { readFileSync } from "node:fs";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

export async function loadReference(modelPath, { threads, verbose, vocabOnly = false }) {
  const llama = await getLlama({
    gpu: false,
    build: "never",
    maxThreads: threads,
    logLevel: verbose ? LlamaLogLevel.info : LlamaLogLevel.error,
    logger: (level, message) => process.stderr.write(`[llama.cpp ${level}] ${message}\n`),
  });
  const model = await llama.loadModel({ modelPath, gpuLayers: 0, vocabOnly });
  return { llama, model };
}

/** "node-llama-cpp X.Y.Z": the runner named in the JSON. */
export function runnerName() {
  return `node-llama-cpp ${JSON.parse(readFileSync(new URL("node_modules/node-llama-cpp/package.json", import.meta.url), "utf8")).version}`;
}
