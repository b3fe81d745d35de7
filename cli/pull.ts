// `velo pull`: a GGUF from the Hugging Face hub (hf:OWNER/REPO[:QUANT] or hf:OWNER/REPO/FILE.gguf)
// or a plain URL, into the model store. Downloads go to NAME.gguf.part, resume with HTTP ranges,
// are checked against the hub's LFS sha256, and are renamed into place only when complete.
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statfsSync, statSync, writeFileSync, writeSync } from "node:fs";
import { basename, join } from "node:path";
import pkg from "../package.json" with { type: "json" };
import { findStored, storeDir, type StoredModel } from "./models";
import { formatBytes, ProgressBar } from "./progress";
import { CliError } from "./ui";

/** The hub's address: $VELO_HF_ENDPOINT, else $HF_ENDPOINT (as huggingface_hub reads it), else huggingface.co. */
export function hubEndpoint(): string {
  return (process.env.VELO_HF_ENDPOINT || process.env.HF_ENDPOINT || "https://huggingface.co").replace(/\/+$/, "");
}

function hfToken(): string | undefined {
  return process.env.HF_TOKEN || process.env.HUGGING_FACE_HUB_TOKEN || undefined;
}

export interface HfSpec {
  repo: string;
  quant?: string;
  file?: string;
  revision: string;
}

/** hf:OWNER/REPO[:QUANT], hf:OWNER/REPO/FILE.gguf, with an optional @REVISION after the repo. */
export function parseHfSpec(spec: string): HfSpec {
  const m = /^(?:hf:|hf\.co\/|huggingface\.co\/)([\w.-]+\/[\w.-]+?)(?:@([\w.\/-]+?))?(?:\/(.+\.gguf)|:([\w.-]+))?$/i.exec(spec);
  if (!m) throw new CliError(`not a model spec: ${spec} (expected hf:OWNER/REPO[:QUANT], hf:OWNER/REPO/FILE.gguf or an http(s) URL)`, 2);
  return { repo: m[1]!, revision: m[2] ?? "main", file: m[3], quant: m[4] };
}

interface Sibling {
  rfilename: string;
  size?: number;
  lfs?: { sha256?: string; size?: number };
}

function authHeaders(): Record<string, string> {
  const t = hfToken();
  return { "user-agent": `velo/${pkg.version}`, ...(t ? { authorization: `Bearer ${t}` } : {}) };
}

function accessError(status: number, what: string): CliError {
  const token = hfToken();
  return new CliError(
    status === 401 && !token
      ? `${what}: 401 unauthorized: the repository is gated or private (or does not exist); accept its terms on the hub and set HF_TOKEN to an access token`
      : `${what}: ${status} ${status === 403 ? "forbidden" : "unauthorized"}: ${token ? "HF_TOKEN does not give access (gated: accept the terms on the model's page with this account; check the token's scope)" : "gated or private: set HF_TOKEN to an access token"}`,
  );
}

async function hubFetch(url: string, init: RequestInit = {}): Promise<Response> {
  try {
    return await fetch(url, init);
  } catch (e) {
    throw new CliError(`cannot reach ${new URL(url).origin}: ${(e as Error).message}`);
  }
}

/** The repository's files with their sizes and LFS sha256 (the model API, blobs=true). */
export async function listRepo(spec: HfSpec): Promise<Sibling[]> {
  const url = `${hubEndpoint()}/api/models/${spec.repo}/revision/${encodeURIComponent(spec.revision)}?blobs=true`;
  const r = await hubFetch(url, { headers: authHeaders() });
  if (r.status === 401 || r.status === 403) throw accessError(r.status, `hf:${spec.repo}`);
  if (r.status === 404) throw new CliError(`hf:${spec.repo}: no such repository${spec.revision !== "main" ? ` or revision ${spec.revision}` : ""} on ${hubEndpoint()}`);
  if (!r.ok) throw new CliError(`hf:${spec.repo}: the hub answered ${r.status} ${r.statusText}`);
  const body = (await r.json()) as { siblings?: Sibling[] };
  return body.siblings ?? [];
}

const SPLIT = /-\d{5}-of-\d{5}\.gguf$/i;
const norm = (x: string) => x.toLowerCase().replace(/[^a-z0-9]+/g, "_");

/** The GGUF a spec means: its FILE, the one matching QUANT, the only one, or the Q4_K_M one. */
export function chooseFile(spec: HfSpec, siblings: Sibling[]): Sibling {
  const ggufs = siblings.filter((s) => /\.gguf$/i.test(s.rfilename) && !/mmproj/i.test(basename(s.rfilename)));
  const names = () => ggufs.map((s) => s.rfilename).join(", ") || "none";
  if (spec.file) {
    const f = siblings.find((s) => s.rfilename === spec.file);
    if (!f) throw new CliError(`hf:${spec.repo} has no file ${spec.file} (GGUF files: ${names()})`);
    return f;
  }
  if (ggufs.length === 0) throw new CliError(`hf:${spec.repo} has no GGUF file (${siblings.length} files, none ending in .gguf)`);
  let pick: Sibling[];
  if (spec.quant) {
    const q = norm(spec.quant);
    // a name ending in the quant (model.Q4_K_M.gguf) first, then one holding it between separators
    pick = ggufs.filter((s) => new RegExp(`(^|_)${q}$`).test(norm(basename(s.rfilename).replace(/\.gguf$/i, ""))));
    if (pick.length === 0) pick = ggufs.filter((s) => new RegExp(`(^|_)${q}(_|$)`).test(norm(basename(s.rfilename).replace(/\.gguf$/i, ""))));
    if (pick.length === 0) throw new CliError(`hf:${spec.repo} has no ${spec.quant} file (GGUF files: ${names()})`);
  } else if (ggufs.length === 1) {
    pick = ggufs;
  } else {
    pick = ggufs.filter((s) => /q4_k_m/i.test(s.rfilename));
    if (pick.length === 0) throw new CliError(`hf:${spec.repo} has ${ggufs.length} GGUF files: choose one with hf:${spec.repo}:QUANT (${names()})`);
  }
  if (pick.length > 1 && pick.every((s) => SPLIT.test(s.rfilename))) {
    throw new CliError(`hf:${spec.repo}: ${spec.quant ?? "that file"} is split into ${pick.length} parts (${pick[0]!.rfilename} …); Velo loads single-file GGUFs only`);
  }
  if (pick.length > 1) throw new CliError(`hf:${spec.repo}: ${spec.quant ?? "Q4_K_M"} matches ${pick.length} files: name one with hf:${spec.repo}/FILE.gguf (${pick.map((s) => s.rfilename).join(", ")})`);
  if (SPLIT.test(pick[0]!.rfilename)) throw new CliError(`hf:${spec.repo}: ${pick[0]!.rfilename} is one part of a split GGUF; Velo loads single-file GGUFs only`);
  return pick[0]!;
}

export interface PullOptions {
  /** Store name (default: the file name without .gguf). */
  name?: string;
  /** Re-download even when the file is stored. */
  force?: boolean;
  /** Progress bar on/off (default: whether stderr is a terminal). */
  tty?: boolean;
  /** Attempts after a dropped connection (each resumes). */
  retries?: number;
  signal?: AbortSignal;
}

interface Target {
  url: string;
  file: string;
  size?: number;
  sha256?: string;
  spec?: string;
  source: string;
  /** Send the hub token with the first request (hub URLs only). */
  auth: boolean;
}

/** Resolves a spec (hf:… or URL) to what to download. */
export async function resolveTarget(spec: string): Promise<Target> {
  if (/^https?:\/\//i.test(spec)) {
    let u: URL;
    try {
      u = new URL(spec);
    } catch {
      throw new CliError(`not a valid URL: ${spec}`, 2);
    }
    const file = decodeURIComponent(basename(u.pathname)) || "model.gguf";
    return { url: spec, file: /\.gguf$/i.test(file) ? file : `${file}.gguf`, source: spec, auth: u.origin === new URL(hubEndpoint()).origin };
  }
  const hf = parseHfSpec(spec);
  const sib = chooseFile(hf, await listRepo(hf));
  const path = sib.rfilename.split("/").map(encodeURIComponent).join("/");
  return {
    url: `${hubEndpoint()}/${hf.repo}/resolve/${encodeURIComponent(hf.revision)}/${path}`,
    file: basename(sib.rfilename),
    size: sib.lfs?.size ?? sib.size,
    sha256: sib.lfs?.sha256?.toLowerCase(),
    spec: `hf:${hf.repo}${hf.file ? `/${hf.file}` : hf.quant ? `:${hf.quant}` : ""}`,
    source: `hf:${hf.repo}/${sib.rfilename}${hf.revision !== "main" ? `@${hf.revision}` : ""}`,
    auth: true,
  };
}

class Retryable extends Error {}

/** Pulls a model into the store and returns its record. */
export async function pull(spec: string, o: PullOptions = {}): Promise<StoredModel> {
  const dir = storeDir();
  const t = await resolveTarget(spec);
  const name = (o.name ?? t.file.replace(/\.gguf$/i, "")).replace(/[\/\\]/g, "_");
  const file = `${name}.gguf`;
  const path = join(dir, file);
  const part = path + ".part";
  const partMeta = part + ".json";
  try {
    mkdirSync(dir, { recursive: true });
  } catch (e) {
    throw new CliError(`cannot create the model store ${dir}: ${(e as Error).message}`);
  }

  if (existsSync(path) && !o.force) {
    const have = findStored(file, dir);
    if (have?.source === t.source && (!t.sha256 || have.sha256 === t.sha256)) {
      process.stderr.write(`${name} is already in the store (${formatBytes(have.size)}): ${path}\n`);
      return have;
    }
    throw new CliError(`a different model named ${name} is already stored${have?.source ? ` (from ${have.source})` : ""}: velo rm ${name} first, or pull with --name or --force`);
  }

  // a partial file of another source or version starts over
  if (existsSync(part)) {
    let prev: { source?: string; sha256?: string; size?: number } = {};
    try {
      prev = JSON.parse(readFileSync(partMeta, "utf8"));
    } catch {}
    if (prev.source !== t.source || prev.sha256 !== t.sha256 || (t.size !== undefined && prev.size !== undefined && prev.size !== t.size)) rmSync(part, { force: true });
  }
  writeFileSync(partMeta, JSON.stringify({ source: t.source, url: t.url, sha256: t.sha256, size: t.size }));

  const retries = o.retries ?? 3;
  for (let attempt = 0; ; attempt++) {
    try {
      await download(t, part, o);
      break;
    } catch (e) {
      if (!(e instanceof Retryable) || attempt >= retries || o.signal?.aborted) {
        if (e instanceof Retryable) throw new CliError(`${e.message}; ${formatBytes(sizeOf(part))} kept: run velo pull ${spec} again to resume`);
        throw e;
      }
      process.stderr.write(`${e.message}: resuming (attempt ${attempt + 2} of ${retries + 1})\n`);
      await Bun.sleep(Math.min(8000, 500 * 2 ** attempt));
    }
  }

  // verify, then move into place
  const size = sizeOf(part);
  if (t.size !== undefined && size !== t.size) {
    rmSync(part, { force: true });
    throw new CliError(`${file}: got ${size} bytes, the hub lists ${t.size}; the partial file was removed, pull again`);
  }
  const sha = await sha256File(part);
  if (t.sha256 && sha !== t.sha256) {
    rmSync(part, { force: true });
    rmSync(partMeta, { force: true });
    throw new CliError(`${file}: SHA-256 mismatch: got ${sha}, the hub publishes ${t.sha256}; the download was removed`);
  }
  renameSync(part, path);
  rmSync(partMeta, { force: true });
  const record: StoredModel = { name, file, path, size, source: t.source, spec: t.spec, url: t.url, sha256: sha, pulled_at: new Date().toISOString() };
  const { path: _p, ...meta } = record;
  writeFileSync(path + ".json", JSON.stringify(meta, null, 2) + "\n");
  return record;
}

function sizeOf(p: string): number {
  try {
    const st = statSync(p);
    return st.isFile() ? st.size : 0;
  } catch {
    return 0;
  }
}

async function sha256File(p: string): Promise<string> {
  const h = new Bun.CryptoHasher("sha256");
  const reader = Bun.file(p).stream().getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    h.update(value);
  }
  return h.digest("hex");
}

function freeBytes(dir: string): number | undefined {
  try {
    const s = statfsSync(dir);
    return Number(s.bavail) * Number(s.bsize);
  } catch {
    return undefined;
  }
}

/** One attempt: GET (following redirects by hand) from the part file's end. */
async function download(t: Target, part: string, o: PullOptions): Promise<void> {
  let have = sizeOf(part);
  if (t.size !== undefined && have === t.size) return; // complete already; verified by the caller
  if (t.size !== undefined && have > t.size) {
    rmSync(part, { force: true });
    have = 0;
  }
  let url = t.url;
  let res: Response | undefined;
  for (let hops = 0; hops < 10; hops++) {
    const headers: Record<string, string> = { "user-agent": `velo/${pkg.version}` };
    // the token goes to the hub only, never to the CDN a redirect points at
    if (t.auth && new URL(url).origin === new URL(t.url).origin) Object.assign(headers, authHeaders());
    if (have > 0) headers.range = `bytes=${have}-`;
    try {
      res = await fetch(url, { headers, redirect: "manual", signal: o.signal });
    } catch (e) {
      if (o.signal?.aborted) throw e;
      throw new Retryable(`connection to ${new URL(url).origin} failed: ${(e as Error).message}`);
    }
    if (res.status >= 300 && res.status < 400 && res.headers.get("location")) {
      url = new URL(res.headers.get("location")!, url).toString();
      await res.body?.cancel();
      continue;
    }
    break;
  }
  if (!res) throw new CliError(`${t.url}: too many redirects`);
  if (res.status === 401 || res.status === 403) throw accessError(res.status, t.source);
  if (res.status === 404) throw new CliError(`${t.source}: file not found (404 at ${url})`);
  if (res.status === 416 && t.size === undefined && have > 0) return; // the server has no more: complete
  if (res.status >= 500) throw new Retryable(`${t.source}: the server answered ${res.status}`);
  if (res.status !== 200 && res.status !== 206) throw new CliError(`${t.source}: the server answered ${res.status} ${res.statusText}`);

  let start = have;
  if (res.status === 200 && have > 0) start = 0; // no range support: start over
  if (res.status === 206) {
    const m = /bytes (\d+)-/.exec(res.headers.get("content-range") ?? "");
    if (!m || Number(m[1]) !== have) {
      await res.body?.cancel();
      rmSync(part, { force: true });
      throw new Retryable(`${t.source}: the server resumed at the wrong offset`);
    }
  }
  const len = Number(res.headers.get("content-length") ?? NaN);
  const total = t.size ?? (Number.isFinite(len) ? start + len : undefined);
  if (total !== undefined) {
    const free = freeBytes(join(part, ".."));
    if (free !== undefined && free < total - start) {
      await res.body?.cancel();
      throw new CliError(`not enough disk space in ${join(part, "..")}: ${t.file} needs ${formatBytes(total - start)} more, ${formatBytes(free)} free (set VELO_MODELS to a store on a larger disk)`);
    }
  }

  const fd = openSync(part, start === 0 ? "w" : "a");
  const bar = new ProgressBar({ label: `pulling ${t.file}`, total, start, tty: o.tty });
  let got = start;
  let head: Uint8Array | null = start >= 4 ? null : new Uint8Array(0);
  try {
    const reader = res.body!.getReader();
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (e) {
        if (o.signal?.aborted) throw e;
        throw new Retryable(`connection lost after ${formatBytes(got)}${total ? ` of ${formatBytes(total)}` : ""}`);
      }
      if (chunk.done) break;
      const value = chunk.value;
      if (head) {
        // the first bytes say whether this is a GGUF at all (an HTML error page, a safetensors file …)
        const h = new Uint8Array(head.length + value.length);
        h.set(head);
        h.set(value, head.length);
        head = h;
        if (head.length >= 4) {
          const magic = new TextDecoder().decode(head.subarray(0, 4));
          if (magic !== "GGUF") {
            await reader.cancel();
            closeSync(fd);
            rmSync(part, { force: true });
            rmSync(part + ".json", { force: true });
            bar.stop();
            const shown = new TextDecoder().decode(head.subarray(0, 16)).replace(/[^\x20-\x7e]/g, ".");
            throw new CliError(`${t.source} is not a GGUF file (it starts with '${shown}'); nothing was kept`);
          }
          head = null;
        }
      }
      try {
        writeSync(fd, value);
      } catch (e) {
        const err = e as NodeJS.ErrnoException;
        await reader.cancel().catch(() => {});
        bar.stop();
        if (err.code === "ENOSPC" || err.code === "EDQUOT") {
          throw new CliError(`disk full while writing ${part} (after ${formatBytes(got)}): free some space and run velo pull again to resume, or set VELO_MODELS to a store on a larger disk`);
        }
        throw new CliError(`cannot write ${part}: ${err.message}`);
      }
      got += value.length;
      bar.update(got);
    }
  } catch (e) {
    bar.stop();
    throw e;
  } finally {
    try {
      closeSync(fd);
    } catch {}
  }
  if (total !== undefined && got < total) {
    bar.stop();
    throw new Retryable(`connection closed after ${formatBytes(got)} of ${formatBytes(total)}`);
  }
  bar.finish(`pulled ${t.file}: ${formatBytes(got)}${got > start ? ` at ${formatBytes(bar.rate())}/s` : ""}`);
}
