// A small GGUF metadata reader for tooling (the engine has its own reader in Swift). It
// parses the header and the key/values and keeps each value's encoded bytes, so another
// file can copy them verbatim through the writer's `{ type: "raw", bytes }` value.
// Every length and count is checked against the file size before it is trusted.
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { ValueType } from "./writer";

export interface GGUFKeyValue {
  key: string;
  /** The value's type id (ValueType). */
  type: number;
  /** Encoded value: type id + payload, exactly as in the file. */
  raw: Uint8Array;
}

export interface GGUFMetadata {
  version: number;
  tensorCount: number;
  kvs: GGUFKeyValue[];
  /** Byte offset just past the last key/value (where the tensor table starts). */
  end: number;
}

export class GGUFFormatError extends Error {}

/** Thrown when a prefix of the file ran out before the metadata did. */
class NeedMoreBytes extends Error {
  constructor() { super("the file got shorter while it was being read"); }
}

// Payload sizes of the fixed-size value types, by type id; strings and arrays vary.
const SCALAR_SIZE: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
// The smallest encoding of one array element of each type, to bound counts before looping.
const minSize = (type: number) => SCALAR_SIZE[type] ?? (type === ValueType.string ? 8 : 12);
const MAX_NESTING = 8;
const dec = new TextDecoder("utf-8", { fatal: false });

class Cursor {
  pos = 0;
  private dv: DataView;
  /** `bytes` is a prefix of a file of `fileSize` bytes. */
  constructor(private bytes: Uint8Array, private fileSize: number) {
    this.dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }
  need(n: number, what: string) {
    if (n > this.fileSize - this.pos) throw new GGUFFormatError(`${what} at offset ${this.pos} runs past the end of the file (${this.fileSize} bytes)`);
    if (n > this.bytes.length - this.pos) throw new NeedMoreBytes();
  }
  u32(what: string): number {
    this.need(4, what);
    const v = this.dv.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }
  /** A u64 count or length, which must also fit what is left of the file at `unit` bytes each. */
  count(what: string, unit = 1): number {
    this.need(8, what);
    const v = this.dv.getBigUint64(this.pos, true);
    this.pos += 8;
    if (v * BigInt(unit) > BigInt(this.fileSize - this.pos)) throw new GGUFFormatError(`${what} ${v} at offset ${this.pos - 8} is larger than the rest of the file`);
    return Number(v);
  }
  skip(n: number, what: string) {
    this.need(n, what);
    this.pos += n;
  }
  string(what: string): string {
    const n = this.count(`${what} length`);
    this.need(n, what);
    const s = dec.decode(this.bytes.subarray(this.pos, this.pos + n));
    this.pos += n;
    return s;
  }
  slice(start: number, end: number) { return this.bytes.slice(start, end); }
}

/** Skips one value's payload, validating type ids and bounds. */
function skipPayload(c: Cursor, type: number, key: string, depth: number) {
  if (type === ValueType.string) {
    c.skip(c.count(`string length of ${key}`), `string of ${key}`);
  } else if (type === ValueType.array) {
    if (depth >= MAX_NESTING) throw new GGUFFormatError(`${key}: arrays nested deeper than ${MAX_NESTING}`);
    const et = c.u32(`array type of ${key}`);
    checkType(et, key);
    const n = c.count(`array length of ${key}`, minSize(et));
    if (et in SCALAR_SIZE) c.skip(n * SCALAR_SIZE[et]!, `array of ${key}`);
    else for (let i = 0; i < n; i++) skipPayload(c, et, key, depth + 1);
  } else {
    c.skip(SCALAR_SIZE[type]!, `value of ${key}`);
  }
}

function checkType(type: number, key: string) {
  if (!(type in SCALAR_SIZE) && type !== ValueType.string && type !== ValueType.array) throw new GGUFFormatError(`${key}: unknown value type ${type}`);
}

/** Parses the header and metadata from the start of a GGUF file of `fileSize` bytes. */
export function parseGGUFMetadata(bytes: Uint8Array, fileSize = bytes.length): GGUFMetadata {
  const c = new Cursor(bytes, fileSize);
  c.need(4, "magic");
  if (dec.decode(bytes.subarray(0, 4)) !== "GGUF") throw new GGUFFormatError("not a GGUF file (bad magic)");
  c.pos = 4;
  const version = c.u32("version");
  // Version 1 used 32-bit counts and lengths; nothing writes it any more.
  if (version !== 2 && version !== 3) throw new GGUFFormatError(`unsupported GGUF version ${version}`);
  const tensorCount = c.count("tensor count", 8 + 4 + 4 + 8); // name length, n_dims, type, offset
  const kvCount = c.count("key/value count", 8 + 4); // key length, value type
  const kvs: GGUFKeyValue[] = [];
  for (let i = 0; i < kvCount; i++) {
    const key = c.string(`key #${i}`);
    const start = c.pos;
    const type = c.u32(`value type of ${key}`);
    checkType(type, key);
    skipPayload(c, type, key, 0);
    kvs.push({ key, type, raw: c.slice(start, c.pos) });
  }
  return { version, tensorCount, kvs, end: c.pos };
}

/** Reads a GGUF's metadata from disk, reading only as much of the file as the metadata needs. */
export function readGGUFMetadata(path: string): GGUFMetadata {
  return readPrefix(path, parseGGUFMetadata);
}

/** One entry of the tensor table. */
export interface GGUFTensorInfo {
  name: string;
  /** ggml order: dims[0] is the row length. */
  dims: number[];
  /** ggml type id (writer.ts: GGMLTypeId). */
  type: number;
  /** Byte offset of the data in the file (the table's offset plus the data section's start). */
  offset: number;
}

export interface GGUFTensorTable extends GGUFMetadata {
  tensors: GGUFTensorInfo[];
  /** Where the data section starts (the table's end rounded up to general.alignment, default 32). */
  dataOffset: number;
}

/** Parses the header, the metadata and the tensor table from the start of a GGUF file. */
export function parseGGUFTensorTable(bytes: Uint8Array, fileSize = bytes.length): GGUFTensorTable {
  const md = parseGGUFMetadata(bytes, fileSize);
  const c = new Cursor(bytes, fileSize);
  c.pos = md.end;
  const table: Omit<GGUFTensorInfo, "offset">[] = [];
  const rel: bigint[] = [];
  for (let i = 0; i < md.tensorCount; i++) {
    const name = c.string(`name of tensor #${i}`);
    const nDims = c.u32(`dimension count of ${name}`);
    if (nDims < 1 || nDims > 4) throw new GGUFFormatError(`${name}: ${nDims} dimensions`);
    const dims: number[] = [];
    for (let d = 0; d < nDims; d++) dims.push(c.count(`dimension ${d} of ${name}`, 0));
    const type = c.u32(`type of ${name}`);
    c.need(8, `offset of ${name}`);
    rel.push(new DataView(bytes.buffer, bytes.byteOffset + c.pos, 8).getBigUint64(0, true));
    c.pos += 8;
    table.push({ name, dims, type });
  }
  const align = md.kvs.find((kv) => kv.key === "general.alignment");
  const alignment = align ? Number(decodeValue(align.raw)) : 32;
  if (!Number.isInteger(alignment) || alignment < 1) throw new GGUFFormatError(`general.alignment ${alignment}`);
  const dataOffset = Math.ceil(c.pos / alignment) * alignment;
  const tensors = table.map((t, i): GGUFTensorInfo => {
    const offset = dataOffset + Number(rel[i]!);
    if (offset > fileSize) throw new GGUFFormatError(`${t.name}: data offset ${offset} is past the end of the file (${fileSize} bytes)`);
    return { ...t, offset };
  });
  return { ...md, tensors, dataOffset };
}

/** Reads a GGUF's metadata and tensor table from disk (not the tensor data). */
export function readGGUFTensorTable(path: string): GGUFTensorTable {
  return readPrefix(path, parseGGUFTensorTable);
}

/** Runs `parse` on a growing prefix of the file until it has all it needs. */
function readPrefix<T>(path: string, parse: (bytes: Uint8Array, fileSize: number) => T): T {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    // Metadata is usually well under a few MB (vocabularies); read a prefix and grow it if short.
    for (let want = Math.min(size, 1 << 20); ; want = Math.min(size, want * 4)) {
      const buf = new Uint8Array(want);
      let got = 0;
      while (got < want) {
        const n = readSync(fd, buf, got, want - got, got);
        if (n === 0) break;
        got += n;
      }
      try {
        return parse(buf.subarray(0, got), size);
      } catch (e) {
        if (!(e instanceof NeedMoreBytes) || want >= size) throw e;
      }
    }
  } catch (e) {
    if (e instanceof GGUFFormatError) e.message = `${path}: ${e.message}`;
    throw e;
  } finally {
    closeSync(fd);
  }
}

type Decoded = number | bigint | boolean | string | Decoded[];

/** Decodes an encoded value (type id + payload, as in `GGUFKeyValue.raw`) into JS values. */
export function decodeValue(raw: Uint8Array): Decoded {
  const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  let pos = 0;
  const payload = (type: number): Decoded => {
    switch (type) {
      case ValueType.u8: return dv.getUint8(pos++);
      case ValueType.i8: return dv.getInt8(pos++);
      case ValueType.u16: pos += 2; return dv.getUint16(pos - 2, true);
      case ValueType.i16: pos += 2; return dv.getInt16(pos - 2, true);
      case ValueType.u32: pos += 4; return dv.getUint32(pos - 4, true);
      case ValueType.i32: pos += 4; return dv.getInt32(pos - 4, true);
      case ValueType.f32: pos += 4; return dv.getFloat32(pos - 4, true);
      case ValueType.bool: return dv.getUint8(pos++) !== 0;
      case ValueType.u64: pos += 8; return dv.getBigUint64(pos - 8, true);
      case ValueType.i64: pos += 8; return dv.getBigInt64(pos - 8, true);
      case ValueType.f64: pos += 8; return dv.getFloat64(pos - 8, true);
      case ValueType.string: {
        const n = Number(dv.getBigUint64(pos, true));
        pos += 8 + n;
        return dec.decode(raw.subarray(pos - n, pos));
      }
      case ValueType.array: {
        const et = dv.getUint32(pos, true);
        const n = Number(dv.getBigUint64(pos + 4, true));
        pos += 12;
        return Array.from({ length: n }, () => payload(et));
      }
      default: throw new GGUFFormatError(`unknown value type ${type}`);
    }
  };
  pos = 4;
  return payload(dv.getUint32(0, true));
}

/** The number of elements of an encoded array value, without decoding it. */
export function arrayLength(raw: Uint8Array): number {
  const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  if (raw.length < 16 || dv.getUint32(0, true) !== ValueType.array) throw new GGUFFormatError("not an array value");
  return Number(dv.getBigUint64(8, true));
}
