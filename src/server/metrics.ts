import type { EngineStats } from "../engine/engine";
// Prometheus text exposition of the server's counters, the engine's gauges and two latency
// histograms (time to first token, time between tokens).

class Histogram {
  readonly counts: number[];
  sum = 0;
  count = 0;
  constructor(readonly buckets: number[]) {
    this.counts = buckets.map(() => 0);
  }
  observe(v: number) {
    this.sum += v;
    this.count++;
    for (let i = 0; i < this.buckets.length; i++) if (v <= this.buckets[i]!) this.counts[i]!++;
  }
  render(name: string, help: string): string {
    const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} histogram`];
    this.buckets.forEach((b, i) => lines.push(`${name}_bucket{le="${b}"} ${this.counts[i]}`));
    lines.push(`${name}_bucket{le="+Inf"} ${this.count}`, `${name}_sum ${this.sum}`, `${name}_count ${this.count}`);
    return lines.join("\n");
  }
}

export class Metrics {
  readonly requests = new Map<string, number>(); // key: endpoint + status
  promptTokens = 0;
  generatedTokens = 0;
  cachedTokens = 0;
  readonly ttft = new Histogram([0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]);
  readonly interToken = new Histogram([0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2]);

  countRequest(endpoint: string, status: number) {
    const key = `endpoint="${endpoint}",status="${status}"`;
    this.requests.set(key, (this.requests.get(key) ?? 0) + 1);
  }

  render(engine: EngineStats): string {
    const out: string[] = [];
    const counter = (name: string, help: string, value: number) => out.push(`# HELP ${name} ${help}`, `# TYPE ${name} counter`, `${name} ${value}`);
    const gauge = (name: string, help: string, value: number) => out.push(`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, `${name} ${value}`);
    out.push("# HELP velo_requests_total HTTP requests by endpoint and status", "# TYPE velo_requests_total counter");
    for (const [k, v] of this.requests) out.push(`velo_requests_total{${k}} ${v}`);
    counter("velo_prompt_tokens_total", "prompt tokens received", this.promptTokens);
    counter("velo_generated_tokens_total", "tokens generated", this.generatedTokens);
    counter("velo_cached_prompt_tokens_total", "prompt tokens served from kept KV", this.cachedTokens);
    gauge("velo_queue_depth", "requests accepted but not yet running", engine.waiting ?? 0);
    gauge("velo_running_sequences", "sequences in the batch", engine.running ?? 0);
    gauge("velo_kv_page_size", "tokens per KV page", engine.page_size ?? 0);
    gauge("velo_kv_pages_used", "KV pages in use", engine.kv_pages_used ?? 0);
    gauge("velo_kv_pages_free", "KV pages free", engine.kv_pages_free ?? 0);
    counter("velo_preemptions_total", "sequences preempted for lack of KV pages", engine.preemptions ?? 0);
    counter("velo_prefix_cache_hits_total", "requests that started from cached KV pages", engine.prefix_cache_hits ?? 0);
    counter("velo_prefix_cache_misses_total", "requests with no cached prefix", engine.prefix_cache_misses ?? 0);
    counter("velo_prefix_cache_tokens_total", "prompt tokens served from the prefix cache", engine.prefix_cache_tokens_served ?? 0);
    counter("velo_prefix_cache_evictions_total", "cached pages evicted", engine.prefix_cache_evictions ?? 0);
    gauge("velo_prefix_cache_pages", "KV pages held by the prefix cache", engine.prefix_cache_pages ?? 0);
    gauge("velo_kv_pages_shared", "cached KV pages also used by a running sequence", engine.kv_pages_shared ?? 0);
    const reserved = engine.kv_reserved_slots ?? 0;
    gauge("velo_kv_waste_ratio", "reserved but unused KV slots / reserved slots, over running sequences", reserved ? (reserved - engine.kv_used_slots!) / reserved : 0);
    const spec = engine.speculation;
    if (spec) {
      counter("velo_spec_drafted_total", "speculative guesses made", spec.drafted);
      counter("velo_spec_accepted_total", "speculative guesses accepted", spec.accepted);
      gauge("velo_spec_acceptance_ratio", "accepted / drafted guesses", spec.acceptance);
      out.push("# HELP velo_spec_acceptance_by_position acceptance of guesses at each draft position", "# TYPE velo_spec_acceptance_by_position gauge");
      spec.acceptance_by_position.forEach((a, i) => out.push(`velo_spec_acceptance_by_position{position="${i}"} ${a}`));
      counter("velo_spec_paused_steps_total", "sequence-steps with speculation switched off because it did not pay", spec.paused_steps);
    }
    out.push(this.ttft.render("velo_time_to_first_token_seconds", "submission to first token"));
    out.push(this.interToken.render("velo_inter_token_seconds", "time between streamed tokens"));
    return out.join("\n") + "\n";
  }
}
