import type { Pointer } from "bun:ffi";
import { cstr, lib } from "../ffi/library";
import { check, ErrorCode, VeloError } from "./errors";

export interface TokenizerInfo {
  model: string;
  pre: string;
  vocab_size: number;
  bos: number | null;
  eos: number | null;
  add_bos: boolean;
  add_eos: boolean;
}

export interface TensorInfo {
  name: string;
  type: string;
  dims: number[];
  offset: number;
  bytes: number;
}

export interface ModelInfo {
  path: string;
  file_size: number;
  gguf_version: number;
  architecture: string | null;
  name: string | null;
  tensor_count: number;
  parameter_count: number;
  tensor_bytes: number;
  tensor_types: Record<string, number>;
  alignment: number;
  data_offset: number;
  tokenizer: TokenizerInfo | null;
  metadata: Record<string, unknown>;
  tensors: TensorInfo[];
}

export interface TokenizeOptions {
  /** Add BOS/EOS as the model's metadata says (default true). */
  addSpecial?: boolean;
  /** Recognise special-token text such as "</s>" in the input (default false). */
  parseSpecial?: boolean;
}

export interface DetokenizeOptions {
  removeSpecial?: boolean;
  renderSpecial?: boolean;
}

const decoder = new TextDecoder();

/**
 * Calls an entry point that fills a caller buffer, growing the buffer once when the engine
 * reports it too small (it says how much it needs).
 */
function fillBuffer<T extends Uint8Array | Int32Array>(
  make: (n: number) => T,
  initial: number,
  call: (buf: T, cap: number, outLen: BigInt64Array) => number,
): T {
  const outLen = new BigInt64Array(1);
  let buf = make(Math.max(initial, 1));
  let status = call(buf, buf.length, outLen);
  if (status === ErrorCode.bufferTooSmall) {
    buf = make(Number(outLen[0]));
    status = call(buf, buf.length, outLen);
  }
  check(status);
  return buf.subarray(0, Number(outLen[0])) as T;
}

/** An opened GGUF model (memory-mapped by the engine). Close it when done. */
export class Model {
  #handle: Pointer | null;
  #info: ModelInfo | undefined;

  private constructor(
    handle: Pointer,
    readonly path: string,
  ) {
    this.#handle = handle;
  }

  static open(path: string): Model {
    const out = new BigUint64Array(1);
    check(lib().velo_model_open(cstr(path), out));
    return new Model(Number(out[0]) as Pointer, path);
  }

  get handle(): Pointer {
    if (this.#handle === null) throw new VeloError(ErrorCode.invalidArgument, "model is closed");
    return this.#handle;
  }

  close(): void {
    if (this.#handle === null) return;
    const h = this.#handle;
    this.#handle = null;
    check(lib().velo_model_close(h));
  }

  /** Throws when a tensor holds a NaN or an infinity (--check-tensors; one read of the file). */
  checkTensors(): void {
    check(lib().velo_model_check_tensors(this.handle));
  }

  info(): ModelInfo {
    this.#info ??= JSON.parse(
      decoder.decode(fillBuffer((n) => new Uint8Array(n), 64 * 1024, (b, cap, len) => lib().velo_model_info(this.handle, b, cap, len))),
    ) as ModelInfo;
    return this.#info;
  }

  tokenize(text: string, opts: TokenizeOptions = {}): Int32Array {
    const bytes = Buffer.from(text, "utf8");
    const flags = (opts.addSpecial ?? true ? 1 : 0) | (opts.parseSpecial ? 2 : 0);
    // Tokens never outnumber bytes by much: bytes + a few specials is a safe first guess.
    return fillBuffer(
      (n) => new Int32Array(n),
      bytes.length + 8,
      (b, cap, len) => lib().velo_tokenize(this.handle, bytes, bytes.length, flags, b, cap, len),
    );
  }

  detokenizeBytes(ids: ArrayLike<number>, opts: DetokenizeOptions = {}): Uint8Array {
    const tokens = Int32Array.from(ids);
    const flags = (opts.removeSpecial ? 1 : 0) | (opts.renderSpecial ? 2 : 0);
    return fillBuffer(
      (n) => new Uint8Array(n),
      tokens.length * 8 + 16,
      (b, cap, len) => lib().velo_detokenize(this.handle, tokens, tokens.length, flags, b, cap, len),
    );
  }

  detokenize(ids: ArrayLike<number>, opts: DetokenizeOptions = {}): string {
    return decoder.decode(this.detokenizeBytes(ids, opts));
  }

  /** One token's bytes as a listing shows it (may be part of a UTF-8 character). */
  pieceBytes(id: number): Uint8Array {
    return fillBuffer((n) => new Uint8Array(n), 64, (b, cap, len) => lib().velo_token_piece(this.handle, id, b, cap, len));
  }
}
