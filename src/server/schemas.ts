// Request bodies of the OpenAI-compatible endpoints. Known fields are checked strictly;
// unknown fields are refused (as OpenAI does), so a typo never silently changes nothing.
import { z } from "zod";

const stop = z.union([z.string(), z.array(z.string()).max(16)]).optional().nullable();
const unsupportedFalse = z.literal(false).optional().nullable();

/** Sampling and length fields shared by chat and text completions. */
const common = {
  model: z.string().min(1),
  max_tokens: z.number().int().min(1).optional().nullable(),
  temperature: z.number().min(0).max(2).optional().nullable(),
  top_p: z.number().min(0).max(1).optional().nullable(),
  top_k: z.number().int().min(0).optional().nullable(),
  min_p: z.number().min(0).max(1).optional().nullable(),
  seed: z.number().int().optional().nullable(),
  stop,
  presence_penalty: z.number().min(-2).max(2).optional().nullable(),
  frequency_penalty: z.number().min(-2).max(2).optional().nullable(),
  repeat_penalty: z.number().min(0.01).max(100).optional().nullable(),
  stream: z.boolean().optional().nullable(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).strict().optional().nullable(),
  n: z.number().int().min(1).optional().nullable(),
  user: z.string().optional().nullable(),
  logprobs: unsupportedFalse,
  // accepted and ignored: they do not change what a local model computes
  metadata: z.record(z.string(), z.string()).optional().nullable(),
  store: z.boolean().optional().nullable(),
};

const textPart = z.object({ type: z.literal("text"), text: z.string() }).strict();
const content = z.union([z.string(), z.array(textPart)]);

export const chatRequest = z
  .object({
    ...common,
    messages: z
      .array(
        z.object({
          role: z.enum(["system", "developer", "user", "assistant"]),
          content: content.nullable(),
          name: z.string().optional(),
        }).strict(),
      )
      .min(1),
    max_completion_tokens: z.number().int().min(1).optional().nullable(),
    top_logprobs: z.number().int().optional().nullable(),
    response_format: z.object({ type: z.literal("text") }).strict().optional().nullable(),
    parallel_tool_calls: z.boolean().optional().nullable(),
  })
  .strict();
export type ChatRequest = z.infer<typeof chatRequest>;

export const completionRequest = z
  .object({
    ...common,
    prompt: z.union([z.string(), z.array(z.string()).length(1), z.array(z.number().int().min(0)).min(1)]),
    echo: unsupportedFalse,
    suffix: z.null().optional(),
    best_of: z.literal(1).optional().nullable(),
  })
  .strict();
export type CompletionRequest = z.infer<typeof completionRequest>;

export const tokenizeRequest = z
  .object({ content: z.string(), add_special: z.boolean().optional(), parse_special: z.boolean().optional(), with_pieces: z.boolean().optional() })
  .strict();

export const detokenizeRequest = z.object({ tokens: z.array(z.number().int().min(0)) }).strict();

/** The first problem zod found, phrased for an API error. */
export function describeIssue(err: z.ZodError): { message: string; param: string | null } {
  const issue = err.issues[0]!;
  const param = issue.path.length ? issue.path.join(".") : null;
  if (issue.code === "unrecognized_keys") {
    const keys = (issue as { keys: string[] }).keys;
    const where = param ? ` in ${param}` : "";
    return { message: `unrecognized request argument${keys.length > 1 ? "s" : ""}${where}: ${keys.join(", ")}`, param: keys[0] ?? param };
  }
  if (issue.code === "invalid_value" && param && /logprobs|echo/.test(param)) {
    return { message: `${param} is not supported by this server`, param };
  }
  return { message: param ? `${param}: ${issue.message}` : issue.message, param };
}

export const savePrefixRequest = z
  .object({
    prompt: z.string().optional(),
    messages: z.array(z.object({ role: z.enum(["system", "developer", "user", "assistant"]), content: z.string() }).strict()).min(1).optional(),
  })
  .strict();
