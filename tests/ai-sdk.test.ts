// The Vercel AI SDK (ai + @ai-sdk/openai-compatible) against `velo serve`: generateText,
// streamText, structured output with a zod schema (Output.object: ai 7's form of what
// generateObject did), and a tool round trip (a forced call, executed, its result sent back).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, Output, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";
import { testData } from "./helpers/paths";
import { type Running, startServer } from "./helpers/server";

const MODEL = "tiny-random-llama3-bpe";
let server: Running;
let velo: ReturnType<typeof createOpenAICompatible>;

beforeAll(async () => {
  server = await startServer([testData(`${MODEL}.gguf`), "--ctx-size", "4096", "--max-batch-size", "4"]);
  velo = createOpenAICompatible({ name: "velo", baseURL: `${server.url}/v1`, apiKey: "unused", includeUsage: true, supportsStructuredOutputs: true });
});
afterAll(() => server?.proc.kill());

describe("the Vercel AI SDK", () => {
  test("generateText and streamText give the same text", async () => {
    const params = { model: velo.chatModel(MODEL), prompt: "Tell me a story.", maxOutputTokens: 16, temperature: 0, maxRetries: 0 };
    const r = await generateText(params);
    expect(r.text.length).toBeGreaterThan(0);
    expect(r.finishReason).toBe("length");
    expect(r.usage.outputTokens).toBe(16);
    expect(r.usage.inputTokens).toBeGreaterThan(5);

    const s = streamText(params);
    let streamed = "";
    for await (const delta of s.textStream) streamed += delta;
    expect(streamed).toBe(r.text);
    expect(await s.text).toBe(r.text);
    expect(await s.finishReason).toBe("length");
    expect((await s.usage).outputTokens).toBe(16);
  }, 60_000);

  test("structured output with a zod schema, generated and streamed", async () => {
    const schema = z.object({
      name: z.string().max(10),
      age: z.number().int().min(0).max(120),
      tags: z.array(z.enum(["a", "b", "c"])).max(3),
    });
    for (const seed of [1, 2, 3]) {
      const r = await generateText({ model: velo.chatModel(MODEL), prompt: "A person, please.", output: Output.object({ schema }), temperature: 1, seed, maxOutputTokens: 300, maxRetries: 0 });
      expect(schema.safeParse(r.output).success).toBe(true);

      const s = streamText({ model: velo.chatModel(MODEL), prompt: "A person, please.", output: Output.object({ schema }), temperature: 1, seed, maxOutputTokens: 300, maxRetries: 0 });
      let partials = 0;
      for await (const _ of s.partialOutputStream) partials++;
      expect(partials).toBeGreaterThan(0);
      expect(await s.output).toEqual(r.output);
    }
  }, 120_000);

  test("a tool round trip: a forced call, executed, and its result answered", async () => {
    const calls: { city: string; unit: string }[] = [];
    const tools = {
      get_weather: tool({
        description: "Current weather of a city",
        inputSchema: z.object({ city: z.string().min(1).max(12), unit: z.enum(["celsius", "fahrenheit"]) }),
        execute: async (input: { city: string; unit: string }) => {
          calls.push(input);
          return { sky: "sunny", temperature: 21, unit: input.unit };
        },
      }),
    };
    const r = await generateText({
      model: velo.chatModel(MODEL),
      prompt: "What is the weather in Paris?",
      tools,
      // the first step must call the tool; the second answers with its result
      prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? "required" : "none" }),
      stopWhen: stepCountIs(2),
      temperature: 1,
      seed: 1,
      maxOutputTokens: 200,
      maxRetries: 0,
    });
    expect(r.steps.length).toBe(2);
    expect(r.steps[0]!.finishReason).toBe("tool-calls");
    expect(r.steps[0]!.toolCalls.map((c) => c.toolName)).toEqual(["get_weather"]);
    expect(calls.length).toBe(1);
    expect(r.steps[0]!.toolResults[0]!.output).toEqual({ sky: "sunny", temperature: 21, unit: calls[0]!.unit });
    // the second request carried the call and its result: a longer prompt than the question alone
    const alone = await generateText({ model: velo.chatModel(MODEL), prompt: "What is the weather in Paris?", tools, toolChoice: "none", maxOutputTokens: 1, maxRetries: 0 });
    expect(r.steps[1]!.usage.inputTokens!).toBeGreaterThan(alone.usage.inputTokens! + 10);
    expect(r.steps[1]!.toolCalls.length).toBe(0);

    // streamed: the same call arrives through tool-call deltas
    const s = streamText({
      model: velo.chatModel(MODEL),
      prompt: "What is the weather in Paris?",
      tools,
      toolChoice: "required",
      stopWhen: stepCountIs(1),
      temperature: 1,
      seed: 1,
      maxOutputTokens: 200,
      maxRetries: 0,
    });
    const streamedCalls = await s.toolCalls;
    expect(streamedCalls.map((c) => ({ name: c.toolName, input: c.input }))).toEqual(r.steps[0]!.toolCalls.map((c) => ({ name: c.toolName, input: c.input })));
  }, 120_000);
});
