// Velo's own GGUF v3 writer: tests make tiny models of every type and shape with it, and
// bench/ synthesizes random-weight models of real shapes. Tensor data is produced lazily,
// one tensor at a time, so multi-GB files stream with little memory.
import { closeSync, openSync, writeSync } from "node:fs";

export const ValueType = {
  u8: 0, i8: 1, u16: 2, i16: 3, u32: 4, i32: 5, f32: 6, bool: 7, string: 8, array: 9, u64: 10, i64: 11, f64: 12,
} as const;
export type ScalarTypeName = Exclude<keyof typeof ValueType, "array">;

export type ScalarValue = number | bigint | boolean | string | Uint8Array;
export type MetaValue =
  | { type: ScalarTypeName; value: ScalarValue }
  | { type: "array"; elementType: ScalarTypeName | "array"; values: ScalarValue[] | MetaValue[] }
  /** Already-encoded bytes of a value (type id + payload), e.g. copied from another file. */
  | { type: "raw"; bytes: Uint8Array };

export const GGMLTypeId = {
  F32: 0, F16: 1, Q4_0: 2, Q4_1: 3, Q5_0: 6, Q5_1: 7, Q8_0: 8, Q8_1: 9, Q2_K: 10, Q3_K: 11,
  Q4_K: 12, Q5_K: 13, Q6_K: 14, Q8_K: 15, IQ4_NL: 20, IQ4_XS: 23, BF16: 30, MXFP4: 39,
} as const;
export type GGMLTypeName = keyof typeof GGMLTypeId;

/** Elements per block and bytes per block. */
export const blockLayout: Record<GGMLTypeName, [number, number]> = {
  F32: [1, 4], F16: [1, 2], BF16: [1, 2], Q4_0: [32, 18], Q4_1: [32, 20], Q5_0: [32, 22], Q5_1: [32, 24],
  Q8_0: [32, 34], Q8_1: [32, 36], Q2_K: [256, 84], Q3_K: [256, 110], Q4_K: [256, 144], Q5_K: [256, 176],
  Q6_K: [256, 210], Q8_K: [256, 292], IQ4_NL: [32, 18], IQ4_XS: [256, 136], MXFP4: [32, 17],
};

export function tensorBytes(type: GGMLTypeName, dims: number[]): number {
  const [bs, bytes] = blockLayout[type];
  const n = dims.reduce((a, b) => a * b, 1);
  if (dims[0]! % bs !== 0) throw new Error(`row length ${dims[0]} is not a multiple of the ${type} block size ${bs}`);
  return (n / bs) * bytes;
}

export interface TensorSpec {
  name: string;
  type: GGMLTypeName | number;
  /** ggml order: dims[0] is the row length. */
  dims: number[];
  /** Exact byte size of the data (computed from type and dims when omitted). */
  bytes?: number;
  data: Uint8Array | (() => Uint8Array);
}

const enc = new TextEncoder();

class ByteSink {
  parts: Uint8Array[] = [];
  length = 0;
  push(b: Uint8Array) {
    this.parts.push(b);
    this.length += b.length;
  }
  scalar(type: number, v: number | bigint | boolean) {
    const sizes = [1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8];
    const b = new Uint8Array(sizes[type]!);
    const dv = new DataView(b.buffer);
    switch (type) {
      case 0: dv.setUint8(0, Number(v)); break;
      case 1: dv.setInt8(0, Number(v)); break;
      case 2: dv.setUint16(0, Number(v), true); break;
      case 3: dv.setInt16(0, Number(v), true); break;
      case 4: dv.setUint32(0, Number(v), true); break;
      case 5: dv.setInt32(0, Number(v), true); break;
      case 6: dv.setFloat32(0, Number(v), true); break;
      case 7: dv.setUint8(0, v ? 1 : 0); break;
      case 10: dv.setBigUint64(0, BigInt(v), true); break;
      case 11: dv.setBigInt64(0, BigInt(v), true); break;
      case 12: dv.setFloat64(0, Number(v), true); break;
      default: throw new Error(`not a scalar type ${type}`);
    }
    this.push(b);
  }
  u32(v: number) { this.scalar(4, v); }
  u64(v: number | bigint) { this.scalar(10, v); }
  string(s: string | Uint8Array) {
    const b = typeof s === "string" ? enc.encode(s) : s;
    this.u64(b.length);
    this.push(b);
  }
  bytes(): Uint8Array {
    const out = new Uint8Array(this.length);
    let o = 0;
    for (const p of this.parts) { out.set(p, o); o += p.length; }
    return out;
  }
}

function writeValuePayload(sink: ByteSink, type: number, v: unknown) {
  if (type === ValueType.string) sink.string(v as string | Uint8Array);
  else if (type === ValueType.array) writeArray(sink, v as Extract<MetaValue, { type: "array" }>);
  else sink.scalar(type, v as number);
}

function writeArray(sink: ByteSink, a: Extract<MetaValue, { type: "array" }>) {
  const et = ValueType[a.elementType];
  sink.u32(et);
  sink.u64(a.values.length);
  for (const v of a.values) writeValuePayload(sink, et, v);
}

function encodeValue(sink: ByteSink, v: MetaValue) {
  if (v.type === "raw") { sink.push(v.bytes); return; }
  sink.u32(ValueType[v.type]);
  if (v.type === "array") writeArray(sink, v);
  else writeValuePayload(sink, ValueType[v.type], v.value);
}

/** Shorthands for metadata values. */
export const meta = {
  str: (value: string): MetaValue => ({ type: "string", value }),
  u32: (value: number): MetaValue => ({ type: "u32", value }),
  i32: (value: number): MetaValue => ({ type: "i32", value }),
  f32: (value: number): MetaValue => ({ type: "f32", value }),
  bool: (value: boolean): MetaValue => ({ type: "bool", value }),
  arr: (elementType: ScalarTypeName, values: (number | string | boolean | bigint)[]): MetaValue => ({ type: "array", elementType, values }),
};

export interface GGUFDocument {
  metadata: [string, MetaValue][];
  tensors: TensorSpec[];
  alignment?: number;
  version?: number;
}

/** Encodes everything before the tensor data (header, metadata, tensor table, padding). */
export function encodeHeader(doc: GGUFDocument): { header: Uint8Array; offsets: number[]; sizes: number[] } {
  const alignment = doc.alignment ?? 32;
  const sink = new ByteSink();
  sink.push(enc.encode("GGUF"));
  sink.u32(doc.version ?? 3);
  sink.u64(doc.tensors.length);
  sink.u64(doc.metadata.length);
  for (const [k, v] of doc.metadata) {
    sink.string(k);
    encodeValue(sink, v);
  }
  const offsets: number[] = [];
  const sizes: number[] = [];
  let off = 0;
  for (const t of doc.tensors) {
    const typeId = typeof t.type === "number" ? t.type : GGMLTypeId[t.type];
    const size = t.bytes ?? (typeof t.type === "number" ? (t.data as Uint8Array).length : tensorBytes(t.type, t.dims));
    sink.string(t.name);
    sink.u32(t.dims.length);
    for (const d of t.dims) sink.u64(d);
    sink.u32(typeId);
    sink.u64(off);
    offsets.push(off);
    sizes.push(size);
    off = Math.ceil((off + size) / alignment) * alignment;
  }
  const pad = (alignment - (sink.length % alignment)) % alignment;
  sink.push(new Uint8Array(pad));
  return { header: sink.bytes(), offsets, sizes };
}

/** The whole file in memory (small test models). */
export function encodeGGUF(doc: GGUFDocument): Uint8Array {
  const chunks: Uint8Array[] = [];
  writeChunks(doc, (c) => chunks.push(c.slice()));
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let o = 0;
  for (const c of chunks) { out.set(c, o); o += c.length; }
  return out;
}

/** Streams a GGUF to disk, producing each tensor's data only when it is written. */
export function writeGGUF(path: string, doc: GGUFDocument): void {
  const fd = openSync(path, "w");
  try {
    writeChunks(doc, (c) => {
      let done = 0;
      while (done < c.length) done += writeSync(fd, c, done);
    });
  } finally {
    closeSync(fd);
  }
}

function writeChunks(doc: GGUFDocument, emit: (c: Uint8Array) => void) {
  const alignment = doc.alignment ?? 32;
  const { header, sizes } = encodeHeader(doc);
  emit(header);
  doc.tensors.forEach((t, i) => {
    const data = typeof t.data === "function" ? t.data() : t.data;
    if (data.length !== sizes[i]) throw new Error(`tensor ${t.name}: ${data.length} bytes of data, ${sizes[i]} expected`);
    emit(data);
    const pad = (alignment - (data.length % alignment)) % alignment;
    if (pad && i < doc.tensors.length - 1) emit(new Uint8Array(pad));
  });
}
