import chalk from "chalk";
import { Command } from "commander";
import { existsSync, readFileSync } from "node:fs";
import { VeloServer } from "../../src/server/server";
import { preread, reportPlan } from "../load";
import { addCommandHelpEnv, addEngineOptions, addModelOption, chosenModel, addSpeculationOptions, type EngineFlags, engineOptions, opt, parseIntArg, requireModelPath } from "../options";
import { action, CliError, spinner } from "../ui";

interface ServeFlags extends EngineFlags {
  model?: string;
  host: string;
  port: number;
  apiKey?: string;
  maxBatchSize: number;
  maxQueue: number;
  alias?: string;
  prefixCache: boolean;
  prefixCacheFile?: string;
  chatTemplateFile?: string;
  maxBody: number;
  requestTimeout: number;
  idleTimeout: number;
  cors?: string[];
}

export function serveCommand(): Command {
  const cmd = new Command("serve")
    .description("serve a model over an OpenAI-compatible HTTP API")
    .argument("[model]", "GGUF file or stored model name (default: the embedded stories260K)")
    .addOption(opt("--host <addr>", "address to bind (127.0.0.1 keeps it local)").default("127.0.0.1"))
    .addOption(opt("--port <n>", "port").default(8080).argParser(parseIntArg("--port", 0, 65535)))
    .addOption(opt("--api-key <key>", "require 'Authorization: Bearer <key>'"))
    .addOption(opt("--max-queue <n>", "requests that may wait beyond the batch before 503").default(64).argParser(parseIntArg("--max-queue", 0, 1 << 20)))
    .addOption(opt("--alias <id>", "model id clients use (default: the file name)"))
    .addOption(opt("--prefix-cache-file <path>", "load this saved prefix at start; POST /prefix-cache/save writes it"))
    .addOption(opt("--chat-template-file <path>", "a Jinja chat template to use instead of the model's own (tool calling follows its syntax)"))
    .addOption(opt("--max-body <MiB>", "largest request body; larger ones get 413").default(8).argParser(parseIntArg("--max-body", 1, 1 << 12)))
    .addOption(opt("--request-timeout <s>", "seconds a request may generate before it is cut off (504, or an error event when streamed); 0 = no deadline").default(600).argParser(parseIntArg("--request-timeout", 0, 1 << 24)))
    .addOption(opt("--idle-timeout <s>", "seconds a connection may stay silent (slow bodies, idle keep-alive) before it is closed; 0 = never").default(60).argParser(parseIntArg("--idle-timeout", 0, 255)))
    .addOption(opt("--cors <origin>", "allow this browser origin (repeatable, or comma-separated; '*' for any); CORS is off without it")
      .argParser((v: string, prev: string[] | undefined) => [...(prev ?? []), ...v.split(",").map((o) => o.trim()).filter(Boolean)]));
  addModelOption(cmd);
  addEngineOptions(cmd);
  addSpeculationOptions(cmd);
  cmd.action(
    action(async (modelArg: string | undefined, f: ServeFlags) => {
      const modelPath = requireModelPath(chosenModel(cmd, modelArg, f.model));
      const draftPath = f.draft ? requireModelPath(f.draft) : undefined;
      if (f.spec === "draft" && !f.draft) throw new CliError("--spec draft needs --draft MODEL", 2);
      let chatTemplate: string | undefined;
      if (f.chatTemplateFile !== undefined) {
        if (!existsSync(f.chatTemplateFile)) throw new CliError(`chat template file not found: ${f.chatTemplateFile}`);
        chatTemplate = readFileSync(f.chatTemplateFile, "utf8");
      }
      const server = new VeloServer({
        chatTemplate, maxBodyBytes: f.maxBody << 20, requestTimeoutS: f.requestTimeout, idleTimeoutS: f.idleTimeout, corsOrigins: f.cors,
        modelPath, draftPath, modelId: f.alias, host: f.host, prefixCacheFile: f.prefixCacheFile, port: f.port, apiKey: f.apiKey, maxQueue: f.maxQueue,
        // the context: the model's trained one unless given, and the batch unless given, shortened to fit the device
        checkTensors: f.checkTensors,
        engine: { ...engineOptions(f), batchAuto: cmd.getOptionValueSource("maxBatchSize") === "default" },
      });
      let http;
      try {
        http = server.start();
      } catch (e) {
        throw new CliError(`cannot listen on ${f.host}:${f.port}: ${(e as Error).message}`);
      }
      // a progress bar while the file is read (the server already answers /health: loading)
      preread(draftPath ? [modelPath, draftPath] : [modelPath], process.stderr.isTTY === true);
      const spin = spinner(`loading ${modelPath}`).start();
      try {
        server.load();
      } catch (e) {
        spin.stop();
        await server.stop();
        throw e;
      }
      spin.stop();
      reportPlan(server.engine, true);
      const stats = server.engine.stats();
      console.error(
        chalk.green(`velo serving '${server.modelId}' on http://${http.hostname}:${http.port}`) +
          chalk.dim(` (batch ${stats.max_batch_size}, context ${stats.context_size}, ${stats.kv_pages_total} KV pages of ${stats.page_size} tokens, ${stats.threads} threads` +
            (server.prefixTokensLoaded ? `, ${server.prefixTokensLoaded} prefix tokens loaded from ${f.prefixCacheFile}` : "") + ")"),
      );
      const shutdown = async () => {
        await server.stop();
        process.exit(0);
      };
      process.on("SIGINT", shutdown);
      process.on("SIGTERM", shutdown);
      await new Promise(() => {}); // serve until a signal
    }),
  );
  return addCommandHelpEnv(cmd);
}
