// Engine entry points: create / submit / poll / wait / cancel / stats / destroy.
// Options and requests cross as small JSON documents; events come back as JSON lines.

/// Reads numbers and flags out of a JSON object with type and range checks, naming the
/// offending field in the error. Every key asked for is logged with its type and bounds
/// (`schema`), so a reader that asks for all its keys on every call (as engineOptions does) can
/// refuse the others, list them, and describe itself.
struct JSONFields {
    let object: JSON
    let what: String
    final class Log { var keys: [String] = []; var schema: [JSON] = [] }
    let log = Log()
    /// Whether `ask` also records each field's type and bounds (only for the schema: requests
    /// are read on every submit and need the keys alone).
    var describe = false
    var asked: [String] { log.keys }

    /// The object's keys nothing asked for.
    var unknownKeys: [String] {
        guard case .object(let pairs) = object else { return [] }
        let known = Set(log.keys)
        return pairs.map(\.0).filter { !known.contains($0) }
    }

    private func ask(_ key: String, _ type: String, _ more: [(String, JSON)] = []) {
        log.keys.append(key)
        guard describe else { return }
        log.schema.append(.object([("key", .string(key)), ("type", .string(type))] + more))
    }

    init(_ text: String, what: String) throws {
        let parsed = try JSON.parse(text)
        guard case .object = parsed else { throw VeloError(.invalidArgument, "\(what) must be a JSON object") }
        object = parsed
        self.what = what
    }

    func int(_ key: String, _ range: ClosedRange<Int>) throws -> Int? {
        ask(key, "int", [("min", .int(range.lowerBound)), ("max", .int(range.upperBound))])
        guard let v = object[key], v != .null else { return nil }
        guard let i = v.intValue else { throw VeloError(.invalidArgument, "\(key) must be an integer") }
        guard range.contains(i) else { throw VeloError(.invalidArgument, "\(key) must be between \(range.lowerBound) and \(range.upperBound), got \(i)") }
        return i
    }

    func float(_ key: String, _ range: ClosedRange<Double>) throws -> Float? {
        ask(key, "number", [("min", .number(range.lowerBound)), ("max", .number(range.upperBound))])
        guard let v = object[key], v != .null else { return nil }
        guard let d = v.doubleValue, d.isFinite else { throw VeloError(.invalidArgument, "\(key) must be a number") }
        guard range.contains(d) else { throw VeloError(.invalidArgument, "\(key) must be between \(range.lowerBound) and \(range.upperBound), got \(d)") }
        return Float(d)
    }

    func bool(_ key: String) throws -> Bool? {
        ask(key, "bool")
        guard let v = object[key], v != .null else { return nil }
        guard let b = v.boolValue else { throw VeloError(.invalidArgument, "\(key) must be true or false") }
        return b
    }

    /// `choices`: the values the caller accepts (for the schema; the caller checks them).
    func string(_ key: String, choices: [String]? = nil) throws -> String? {
        ask(key, "string", choices.map { [("choices", .array($0.map { .string($0) }))] } ?? [])
        guard let v = object[key], v != .null else { return nil }
        guard let s = v.stringValue else { throw VeloError(.invalidArgument, "\(key) must be a string") }
        return s
    }
}

/// Engine options from their JSON (the TypeScript side's EngineOptions, snake_cased). Every key
/// is read on every call, so the keys read are the keys accepted (`engineOptionKeys`); any other
/// key is refused by name.
func engineOptions(from text: String) throws -> EngineOptions {
    let (o, f) = try readEngineOptions(text)
    if let bad = f.unknownKeys.first {
        throw VeloError(.invalidArgument, "unknown engine option '\(bad)' (known: \(f.asked.joined(separator: ", ")))")
    }
    return o
}

/// How engine options are read: each key with its type and bounds or choices.
var engineOptionsSchema: JSON { .array((try? readEngineOptions("{}", describe: true).1.log.schema) ?? []) }

private func readEngineOptions(_ text: String, describe: Bool = false) throws -> (EngineOptions, JSONFields) {
    var f = try JSONFields(text, what: "engine options")
    f.describe = describe
    var o = EngineOptions()
    if let v = try f.int("threads", 0...1024), v > 0 { o.threads = v }
    // 0 or absent: the model's trained context, shortened to fit the device
    if let v = try f.int("ctx_size", 0...1 << 20) {
        guard v != 1 else { throw VeloError(.invalidArgument, "ctx_size must be 0 (the model's) or at least 2") }
        o.contextSize = v
    }
    if let v = try f.int("max_batch_size", 1...1024) { o.maxBatchSize = v }
    // max_batch_size is a default the engine may lower (after the context) to fit the device
    o.batchAuto = try f.bool("batch_auto") ?? false
    if let v = try f.int("memory_budget", 0...1 << 44) { o.memoryBudget = v }
    if let v = try f.int("batch_tokens", 1...1 << 16) { o.batchTokens = v }
    if let v = try f.int("kv_pages", 0...1 << 24) { o.kvPages = v }
    if let v = try f.int("page_size", 1...4096) { o.pageSize = v }
    if let v = try f.int("kv_memory", 0...1 << 44) { o.kvMemory = v }
    let kvTypes = KVCacheType.allCases.map(\.rawValue)
    if let t = try f.string("cache_type_k", choices: kvTypes) { o.cacheTypeK = try KVCacheType.parse(t, what: "cache_type_k") }
    if let t = try f.string("cache_type_v", choices: kvTypes) { o.cacheTypeV = try KVCacheType.parse(t, what: "cache_type_v") }
    o.profile = try f.bool("profile") ?? false
    o.prefixCache = try f.bool("prefix_cache") ?? true
    if let mode = try f.string("spec", choices: SpeculationOptions.Mode.allCases.map(\.rawValue)) {
        guard let m = SpeculationOptions.Mode(rawValue: mode) else { throw VeloError(.invalidArgument, "spec must be off, ngram or draft") }
        o.spec.mode = m
    }
    if let k = try f.int("draft_max", 1...16) { o.spec.draftMax = k }
    if let a = try f.bool("spec_adapt") { o.spec.adapt = a }
    if let b = try f.string("backend", choices: BackendChoice.allCases.map(\.rawValue)) {
        guard let c = BackendChoice(rawValue: b) else { throw VeloError(.invalidArgument, "backend must be auto, cpu, vulkan or metal (got '\(b)')") }
        o.backend = c
    }
    if let d = try f.int("device", -1...1024), d >= 0 { o.device = d }
    return (o, f)
}

func generationRequest(from text: String, tokenizer: Tokenizer) throws -> GenerationRequest {
    let f = try JSONFields(text, what: "request")
    var prompt: [Int32]
    if let ids = f.object["prompt_tokens"], ids != .null {
        guard let arr = ids.arrayValue else { throw VeloError(.invalidArgument, "prompt_tokens must be an array of token ids") }
        prompt = try arr.map {
            guard let i = $0.intValue, i >= 0, i <= Int(Int32.max) else { throw VeloError(.invalidArgument, "prompt_tokens must hold token ids") }
            return Int32(i)
        }
    } else if let p = try f.string("prompt") {
        prompt = tokenizer.encode(p, addSpecial: try f.bool("add_special") ?? true, parseSpecial: try f.bool("parse_special") ?? false)
    } else {
        throw VeloError(.invalidArgument, "the request needs prompt or prompt_tokens")
    }
    var r = GenerationRequest(prompt: prompt)
    if let v = try f.int("max_tokens", 0...1 << 24) { r.maxTokens = v }
    var s = SamplingParams()
    if let v = try f.float("temperature", 0...100) { s.temperature = v }
    if let v = try f.int("top_k", 0...1 << 24) { s.topK = v }
    if let v = try f.float("top_p", 0...1) { s.topP = v }
    if let v = try f.float("min_p", 0...1) { s.minP = v }
    if let v = try f.float("repeat_penalty", 0.01...100) { s.repeatPenalty = v }
    if let v = try f.float("presence_penalty", -2...2) { s.presencePenalty = v }
    if let v = try f.float("frequency_penalty", -2...2) { s.frequencyPenalty = v }
    if let v = try f.int("penalty_window", -1...1 << 24) { s.penaltyWindow = v }
    if let v = f.object["seed"], v != .null {
        guard let d = v.doubleValue, d == d.rounded(), abs(d) <= 9.007e15 else { throw VeloError(.invalidArgument, "seed must be an integer") }
        s.seed = UInt64(bitPattern: Int64(d))
    }
    r.sampling = s
    if let stop = f.object["stop"], stop != .null {
        if let one = stop.stringValue {
            r.stop = [one]
        } else if let many = stop.arrayValue {
            r.stop = try many.map {
                guard let s = $0.stringValue else { throw VeloError(.invalidArgument, "stop must be a string or a list of strings") }
                return s
            }
        } else {
            throw VeloError(.invalidArgument, "stop must be a string or a list of strings")
        }
    }
    r.ignoreEOS = try f.bool("ignore_eos") ?? false
    r.topLogits = try f.int("top_logits", 0...1000) ?? 0
    r.logprobs = try f.int("logprobs", 0...20) ?? -1
    if let g = f.object["grammar"], g != .null {
        guard let text = g.stringValue else { throw VeloError(.invalidArgument, "grammar must be a string (GBNF)") }
        r.grammar = text
    }
    if let bias = f.object["logit_bias"], bias != .null {
        guard case .object(let pairs) = bias else { throw VeloError(.invalidArgument, "logit_bias must be an object of token id: bias") }
        for (k, v) in pairs {
            guard let id = Int32(k), id >= 0, Int(id) < tokenizer.vocabSize else {
                throw VeloError(.invalidArgument, "logit_bias: '\(k)' is not a token id of this model (0..<\(tokenizer.vocabSize))")
            }
            guard let b = v.doubleValue, b.isFinite, (-100...100).contains(b) else {
                throw VeloError(.invalidArgument, "logit_bias: the bias of token \(k) must be a number from -100 to 100")
            }
            r.sampling.logitBias[id] = Float(b)
        }
    }
    return r
}

/// How engine options are read, as a JSON array: {key, type ("int", "bool", "string"), min and
/// max (ints), choices (strings)} for each key velo_engine_create accepts.
@_cdecl("velo_engine_options_schema")
public func velo_engine_options_schema(_ out: UnsafeMutablePointer<UInt8>?, _ cap: Int64, _ outLen: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call { try copyOut(Array(engineOptionsSchema.serialized.utf8), out, Int(cap), outLen) }
}

/// Starts an engine for `model`; `draft` (nullable) is the draft model of speculative decoding.
@_cdecl("velo_engine_create")
public func velo_engine_create(_ model: UnsafeMutableRawPointer?, _ draft: UnsafeMutableRawPointer?, _ optionsJSON: UnsafePointer<CChar>?,
                               _ out: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32 {
    CABI.call {
        guard let out else { throw VeloError(.invalidArgument, "null output handle") }
        out.pointee = nil
        let file = try CABI.lookup(model, as: ModelFile.self)
        let draftFile = try draft.map { try CABI.lookup($0, as: ModelFile.self) }
        var options = try engineOptions(from: optionsJSON.map { String(cString: $0) } ?? "{}")
        if draftFile != nil && options.spec.mode == .off { options.spec.mode = .draft }
        if options.spec.mode == .draft && draftFile == nil {
            throw VeloError(.invalidArgument, "spec 'draft' needs a draft model")
        }
        out.pointee = CABI.register(try Engine(file: file, options: options, draft: draftFile))
    }
}

@_cdecl("velo_engine_destroy")
public func velo_engine_destroy(_ h: UnsafeMutableRawPointer?) -> Int32 {
    CABI.call {
        let engine = try CABI.lookup(h, as: Engine.self)
        engine.shutdown()
        CABI.release(h)
    }
}

@_cdecl("velo_engine_submit")
public func velo_engine_submit(_ h: UnsafeMutableRawPointer?, _ requestJSON: UnsafePointer<CChar>?, _ outId: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call {
        let engine = try CABI.lookup(h, as: Engine.self)
        guard let requestJSON else { throw VeloError(.invalidArgument, "null request") }
        let request = try generationRequest(from: String(cString: requestJSON), tokenizer: engine.file.requireTokenizer())
        let id = try engine.submit(request)
        outId?.pointee = Int64(id)
    }
}

@_cdecl("velo_engine_cancel")
public func velo_engine_cancel(_ h: UnsafeMutableRawPointer?, _ id: Int64) -> Int32 {
    CABI.call { try CABI.lookup(h, as: Engine.self).cancel(Int(id)) }
}

/// Events since the last poll as JSON lines. A too-small buffer fails with code 5 and the
/// size needed; the events stay queued for the next call.
@_cdecl("velo_engine_poll")
public func velo_engine_poll(_ h: UnsafeMutableRawPointer?, _ out: UnsafeMutablePointer<UInt8>?, _ cap: Int64, _ outLen: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call {
        let engine = try CABI.lookup(h, as: Engine.self)
        let events = engine.poll()
        var text = ""
        for e in events {
            e.json.write(to: &text)
            text += "\n"
        }
        let bytes = Array(text.utf8)
        do {
            try copyOut(bytes, out, Int(cap), outLen)
        } catch {
            engine.unpoll(events)
            throw error
        }
    }
}

/// Blocks up to timeout_ms until events are ready: returns 1 if so, 0 on timeout, <0 on error.
@_cdecl("velo_engine_wait")
public func velo_engine_wait(_ h: UnsafeMutableRawPointer?, _ timeoutMs: Int32) -> Int32 {
    do {
        return try CABI.lookup(h, as: Engine.self).wait(timeoutMs: Int(max(0, timeoutMs))) ? 1 : 0
    } catch let e as VeloError {
        CABI.setError(e.message)
        return -e.code.rawValue
    } catch {
        return -VeloError.Code.internalError.rawValue
    }
}

@_cdecl("velo_engine_stats")
public func velo_engine_stats(_ h: UnsafeMutableRawPointer?, _ out: UnsafeMutablePointer<UInt8>?, _ cap: Int64, _ outLen: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call {
        let engine = try CABI.lookup(h, as: Engine.self)
        try copyOut(Array(engine.statsJSON.serialized.utf8), out, Int(cap), outLen)
    }
}

/// Clears the engine's profile (stats' profile_ms and kernel_ms): benchmarks call it after
/// their warm-up runs.
@_cdecl("velo_engine_reset_profile")
public func velo_engine_reset_profile(_ h: UnsafeMutableRawPointer?) -> Int32 {
    CABI.call { try CABI.lookup(h, as: Engine.self).resetProfile() }
}

/// Waits until the kernels the engine builds in the background after its load are in use:
/// benchmarks call it before timing.
@_cdecl("velo_engine_wait_kernels")
public func velo_engine_wait_kernels(_ h: UnsafeMutableRawPointer?) -> Int32 {
    CABI.call { try CABI.lookup(h, as: Engine.self).waitForKernels() }
}

/// Saves the cached KV pages of the longest cached prefix of `tokens` to `path`.
@_cdecl("velo_engine_save_prefix")
public func velo_engine_save_prefix(_ h: UnsafeMutableRawPointer?, _ tokens: UnsafePointer<Int32>?, _ n: Int64,
                                    _ path: UnsafePointer<CChar>?, _ outTokens: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call {
        let engine = try CABI.lookup(h, as: Engine.self)
        guard let path, n > 0, let tokens else { throw VeloError(.invalidArgument, "save_prefix needs tokens and a path") }
        let saved = try engine.savePrefix(Array(UnsafeBufferPointer(start: tokens, count: Int(n))), to: String(cString: path))
        outTokens?.pointee = Int64(saved)
    }
}

/// Loads a prefix file saved from this model into the prefix cache.
@_cdecl("velo_engine_load_prefix")
public func velo_engine_load_prefix(_ h: UnsafeMutableRawPointer?, _ path: UnsafePointer<CChar>?, _ outTokens: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call {
        let engine = try CABI.lookup(h, as: Engine.self)
        guard let path else { throw VeloError(.invalidArgument, "load_prefix needs a path") }
        outTokens?.pointee = Int64(try engine.loadPrefix(from: String(cString: path)))
    }
}

/// Queues the embedding of `n` token ids (used as given: no BOS or EOS is added); writes its
/// request id. It ends with a finish event from velo_engine_poll (its usage counts the tokens);
/// then velo_engine_take_embedding gives the vector. The model's pooling and vector length are
/// in velo_engine_stats ("pooling", "embedding_length").
@_cdecl("velo_engine_submit_embedding")
public func velo_engine_submit_embedding(_ h: UnsafeMutableRawPointer?, _ tokens: UnsafePointer<Int32>?, _ n: Int64,
                                         _ outId: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call {
        let engine = try CABI.lookup(h, as: Engine.self)
        guard n >= 0, n == 0 || tokens != nil else { throw VeloError(.invalidArgument, "invalid token buffer") }
        let ids = n == 0 ? [] : Array(UnsafeBufferPointer(start: tokens, count: Int(n)))
        outId?.pointee = Int64(try engine.submitEmbedding(ids))
    }
}

/// The pooled, L2-normalised vector of a finished embedding request: `embedding_length` floats
/// into `out` (too small: code 5 and the length needed, and the vector stays). Each vector is
/// given once; one never taken is kept until the engine is destroyed.
@_cdecl("velo_engine_take_embedding")
public func velo_engine_take_embedding(_ h: UnsafeMutableRawPointer?, _ id: Int64, _ out: UnsafeMutablePointer<Float>?, _ cap: Int64,
                                       _ outLen: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call {
        let engine = try CABI.lookup(h, as: Engine.self)
        try engine.takeEmbedding(Int(id)) { try copyOut($0, out, Int(cap), outLen) }
    }
}
