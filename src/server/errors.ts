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
}

export const badRequest = (message: string, param: string | null = null, code: string | null = null) =>
  new ApiError(400, message, "invalid_request_error", param, code);

export const notFound = (message: string, code = "not_found") => new ApiError(404, message, "invalid_request_error", null, code);

export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new ApiError(500, message, "server_error", null, "internal_error");
}
