// Request bodies of the OpenAI-compatible endpoints. Known fields are checked strictly;
// unknown fields are refused (as OpenAI does), so a typo never silently changes nothing.
import { z } from "zod";

const stop = z.union([z.string(), z.array(z.string()).max(16)]).optional().nullable();
export const jsonObject = z.record(z.string(), z.unknown());
/** OpenAI's limit on function and schema names. */
export const name64 = z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, "must be 1 to 64 letters, digits, '_' or '-'");

/** Constrained output, OpenAI's way (response_format) and llama.cpp's (grammar, json_schema). */
export const responseFormat = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text") }).strict(),
  // llama.cpp also takes a schema here
  z.object({ type: z.literal("json_object"), schema: jsonObject.optional().nullable() }).strict(),
  z.object({
    type: z.literal("json_schema"),
    json_schema: z.object({
      name: name64,
      description: z.string().optional().nullable(),
      schema: z.union([jsonObject, z.boolean()]).optional().nullable(),
      strict: z.boolean().optional().nullable(),
    }).strict(),
  }).strict(),
]);

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
  // include_obfuscation pads events against side channels on the open internet: nothing to pad here
  stream_options: z.object({ include_usage: z.boolean().optional().nullable(), include_obfuscation: z.boolean().optional().nullable() }).strict().optional().nullable(),
  n: z.number().int().min(1).max(16).optional().nullable(),
  // {"token id": bias}: -100 bans a token
  logit_bias: z.record(z.string().regex(/^\d+$/, "keys must be token ids"), z.number().min(-100).max(100)).optional().nullable(),
  response_format: responseFormat.optional().nullable(),
  grammar: z.string().max(1 << 20).optional().nullable(),
  json_schema: z.union([jsonObject, z.boolean()]).optional().nullable(),
  // fields that change nothing here (service_tier, store, user, …) are in fields.ts
};

const textPart = z.object({ type: z.literal("text"), text: z.string() }).strict();
const content = z.union([z.string(), z.array(textPart)]);

export const toolSchema = z.object({
  type: z.literal("function"),
  function: z.object({
    name: name64,
    description: z.string().optional().nullable(),
    parameters: jsonObject.optional().nullable(),
    strict: z.boolean().optional().nullable(),
  }).strict(),
}).strict();

const toolCall = z.object({
  id: z.string().min(1),
  type: z.literal("function"),
  function: z.object({ name: z.string().min(1), arguments: z.string() }).strict(),
}).strict();

const message = z.object({
  role: z.enum(["system", "developer", "user", "assistant", "tool"]),
  content: content.nullable().optional(),
  name: z.string().optional(),
  tool_calls: z.array(toolCall).optional().nullable(),
  tool_call_id: z.string().optional(),
  refusal: z.string().nullable().optional(),
}).strict().superRefine((m, ctx) => {
  if (m.role === "tool" && !m.tool_call_id) ctx.addIssue({ code: "custom", message: "a tool message needs tool_call_id", path: ["tool_call_id"] });
  if (m.role !== "tool" && m.tool_call_id !== undefined) ctx.addIssue({ code: "custom", message: "only tool messages have tool_call_id", path: ["tool_call_id"] });
  if (m.role !== "assistant" && m.tool_calls) ctx.addIssue({ code: "custom", message: "only assistant messages have tool_calls", path: ["tool_calls"] });
  if (m.role !== "assistant" && m.content == null) ctx.addIssue({ code: "custom", message: `a ${m.role} message needs content`, path: ["content"] });
  if (m.role === "assistant" && m.content == null && !m.tool_calls?.length) ctx.addIssue({ code: "custom", message: "an assistant message needs content or tool_calls", path: ["content"] });
});

export const chatRequest = z
  .object({
    ...common,
    messages: z.array(message).min(1),
    max_completion_tokens: z.number().int().min(1).optional().nullable(),
    logprobs: z.boolean().optional().nullable(),
    top_logprobs: z.number().int().min(0).max(20).optional().nullable(),
    tools: z.array(toolSchema).max(128).optional().nullable(),
    tool_choice: z.union([
      z.enum(["none", "auto", "required"]),
      z.object({ type: z.literal("function"), function: z.object({ name: z.string() }).strict() }).strict(),
    ]).optional().nullable(),
    parallel_tool_calls: z.boolean().optional().nullable(),
  })
  .strict();
export type ChatRequest = z.infer<typeof chatRequest>;

export const completionRequest = z
  .object({
    ...common,
    prompt: z.union([z.string(), z.array(z.string()).length(1), z.array(z.number().int().min(0)).min(1)]),
    // the legacy form: how many alternatives per token (0: only the chosen token's)
    logprobs: z.number().int().min(0).max(20).optional().nullable(),
    // echo, suffix and best_of: fields.ts
  })
  .strict();
export type CompletionRequest = z.infer<typeof completionRequest>;

export const embeddingsRequest = z
  .object({
    model: z.string().min(1),
    // empty lists pass here and get the handler's clearer message
    input: z.union([z.string(), z.array(z.string()).max(2048), z.array(z.number().int().min(0)), z.array(z.array(z.number().int().min(0))).max(2048)]),
    encoding_format: z.enum(["float", "base64"]).optional().nullable(),
    dimensions: z.number().int().min(1).optional().nullable(),
  })
  .strict();
export type EmbeddingsRequest = z.infer<typeof embeddingsRequest>;

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
  return { message: param ? `${param}: ${issue.message}` : issue.message, param };
}

export const savePrefixRequest = z
  .object({
    prompt: z.string().optional(),
    messages: z.array(z.object({ role: z.enum(["system", "developer", "user", "assistant"]), content: z.string() }).strict()).min(1).optional(),
  })
  .strict();
