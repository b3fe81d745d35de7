// OpenAI-shaped errors: every failure a handler can have becomes one of these, so clients
// always get {"error": {"message", "type", "param", "code"}} with a fitting status.
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string = "invalid_request_error",
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  toResponse(): Response {
    return Response.json(
      { error: { message: this.message, type: this.type, param: this.param, code: this.code } },
      { status: this.status, headers: this.headers },
    );
  }

  /** Anthropic's shape, for /v1/messages: {"type": "error", "error": {"type", "message"}}. */
  toAnthropicResponse(): Response {
    return Response.json({ type: "error", error: { type: anthropicType(this.status), message: this.message } }, { status: this.status, headers: this.headers });
  }
}

/** Anthropic's error type for an HTTP status. */
export function anthropicType(status: number): string {
  const types: Record<number, string> = { 400: "invalid_request_error", 401: "authentication_error", 403: "permission_error", 404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error" };
  return types[status] ?? "api_error";
}

export const badRequest = (message: string, param: string | null = null, code: string | null = null) =>
  new ApiError(400, message, "invalid_request_error", param, code);

export const notFound = (message: string, code = "not_found") => new ApiError(404, message, "invalid_request_error", null, code);

export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new ApiError(500, message, "server_error", null, "internal_error");
}
