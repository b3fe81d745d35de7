import { lib } from "../ffi/library";

/** Status codes of the C ABI (VeloError.Code in Swift). */
export const ErrorCode = {
  ok: 0,
  invalidArgument: 1,
  io: 2,
  invalidFile: 3,
  unsupported: 4,
  bufferTooSmall: 5,
  outOfMemory: 6,
  contextOverflow: 7,
  internal: 8,
} as const;

const names: Record<number, string> = Object.fromEntries(Object.entries(ErrorCode).map(([k, v]) => [v, k]));

/** An error reported by the engine, with the C ABI's code and message. */
export class VeloError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
    this.name = "VeloError";
  }
  get codeName(): string {
    return names[this.code] ?? `code ${this.code}`;
  }
}

/** Throws the engine's last error when a call returned a non-zero status. */
export function check(status: number): void {
  if (status === 0) return;
  const msg = lib().velo_last_error()?.toString() || `engine call failed (${names[status] ?? status})`;
  throw new VeloError(status, msg);
}
