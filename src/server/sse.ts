// The one server-sent-events writer every streaming endpoint uses (chat and text completions,
// /v1/responses, /v1/messages): the stream, the keep-alive until the first event, and the tail
// (generations cancelled when the client goes away or a write fails, the stream closed once).
import type { Generation } from "../engine/engine";

export const SSE_HEADERS = { "Content-Type": "text/event-stream", "Cache-Control": "no-cache", Connection: "keep-alive" } as const;

export interface SseWriter {
  /** Writes raw SSE text (one or more complete events). */
  write(text: string): void;
  /** `data: <json>` */
  data(value: unknown): void;
  /** `event: <name>` then `data: <json>` */
  event(name: string, value: unknown): void;
  /** Ends the keep-alive (events flow now). */
  active(): void;
}

/**
 * A text/event-stream response whose events `run` writes. Until `active()`, a keep-alive every
 * 5 s (an SSE comment, or what `keepAlive` writes: Anthropic's `ping`) keeps proxies and clients
 * from timing out during a long prefill. A client that goes away, or a write that fails,
 * cancels `gens`.
 */
export function sseResponse(gens: Generation[], run: (w: SseWriter) => Promise<void>, keepAlive?: (w: SseWriter) => void): Response {
  const enc = new TextEncoder();
  const cancelAll = () => {
    for (const g of gens) g.cancel();
  };
  const stream = new ReadableStream<Uint8Array>({
    start: async (controller) => {
      let timer: ReturnType<typeof setInterval> | undefined;
      const w: SseWriter = {
        write: (text) => controller.enqueue(enc.encode(text)),
        data: (value) => w.write(`data: ${JSON.stringify(value)}\n\n`),
        event: (name, value) => w.write(`event: ${name}\ndata: ${JSON.stringify(value)}\n\n`),
        active: () => clearInterval(timer),
      };
      timer = setInterval(() => (keepAlive ? keepAlive(w) : w.write(": keep-alive\n\n")), 5000);
      try {
        await run(w);
      } catch {
        cancelAll();
      } finally {
        clearInterval(timer);
        try {
          controller.close();
        } catch {
          // already closed by a disconnect
        }
      }
    },
    cancel: () => cancelAll(),
  });
  return new Response(stream, { headers: SSE_HEADERS });
}
