/// A generation request as submitted.
public struct GenerationRequest: Sendable {
    public var prompt: [Int32]
    public var maxTokens: Int = 128
    public var sampling = SamplingParams()
    public var stop: [String] = []
    /// Keep generating past end-of-generation tokens (benchmarks).
    public var ignoreEOS = false
    /// Report the k largest raw logits with every token (reference checks).
    public var topLogits = 0
    /// GBNF the output must follow (`Grammar`); compiled by `Engine.submit`.
    public var grammar: String?
    /// Report each token's log-probability and this many most likely alternatives (-1: none).
    public var logprobs = -1

    public init(prompt: [Int32]) { self.prompt = prompt }
}

public enum FinishReason: String, Sendable {
    case stop, length, cancelled, error
}

/// A request in flight: its tokens, KV pages, sampler and text stream.
final class Sequence {
    let id: Int
    let request: GenerationRequest
    /// Prompt then generated tokens.
    var tokens: [Int32]
    let promptCount: Int
    var table = BlockTable()
    /// Its recurrent-state slot while running (models with DeltaNet layers; nil otherwise).
    var stateSlot: Int?
    /// The prefix cache's checkpoint its slot takes before its first pass (a cached prefix of a
    /// model with a recurrent state), pinned until then.
    var restoreState: Int32?
    /// The checkpoint its slot's state goes to once `at` tokens are computed (a page boundary
    /// the cache then indexes with it).
    var saveState: (id: Int32, at: Int)?
    /// Where its prompt parts from one cached before, when no state was saved there: a
    /// checkpoint goes there too (the shared part of later prompts ends there as well).
    var branchPoint: Int?
    /// Tokens whose K/V are in the pages.
    var computed = 0
    /// Tokens reused from a cache instead of computed.
    var cachedTokens = 0
    var sampler: Sampler
    var text: TextStream
    var cancelled = false
    var finishedFlag = false
    var spec = SpeculationState()
    /// Where the output stands in the request's grammar (nil: unconstrained).
    let matcher: GrammarMatcher?
    /// An embedding request's pool: the prompt is computed, pooled, and nothing is generated
    /// (nil: a generation).
    let embedding: EmbeddingPool?
    let submittedAt: UInt64
    var firstTokenAt: UInt64 = 0
    var promptDoneAt: UInt64 = 0
    var admittedAt: UInt64 = 0

    init(id: Int, request: GenerationRequest, matcher: GrammarMatcher? = nil, embedding: EmbeddingPool? = nil, now: UInt64) {
        self.id = id
        self.matcher = matcher
        self.embedding = embedding
        self.request = request
        tokens = request.prompt
        promptCount = request.prompt.count
        sampler = Sampler(request.sampling)
        text = TextStream(stops: request.stop)
        submittedAt = now
    }

    var generated: Int { tokens.count - promptCount }
    /// Tokens not yet fed through the model (the last one produces the next logits).
    var pending: Int { tokens.count - computed }
}

/// A token's log-softmax over the logits the sampler chose from, and the most likely ones.
public struct TokenLogprobs: Sendable {
    public var chosen: Float
    public var top: [(Int32, Float)]
}

/// What the engine reports to the caller, drained by `poll`.
public enum EngineEvent: Sendable {
    case tokens(id: Int, tokens: [Int32], text: String, topLogits: [(Int32, Float)] = [], logprobs: TokenLogprobs? = nil)
    case finished(id: Int, reason: FinishReason, message: String?, usage: Usage)

    public struct Usage: Sendable {
        public var promptTokens = 0
        public var completionTokens = 0
        public var cachedTokens = 0
        /// Submission to first generated token.
        public var timeToFirstTokenMs = 0.0
        public var promptMs = 0.0
        public var generationMs = 0.0
        /// Speculative decoding: guesses made for this request and how many were kept.
        public var draftedTokens = 0
        public var acceptedTokens = 0
    }

    var json: JSON {
        switch self {
        case .tokens(let id, let tokens, let text, let top, let lp):
            var pairs: [(String, JSON)] = [("id", .int(id)), ("tokens", .array(tokens.map { .int(Int($0)) })), ("text", .string(text))]
            if !top.isEmpty {
                pairs.append(("top_logits", .array(top.map { .array([.int(Int($0.0)), .number(Double($0.1))]) })))
            }
            if let lp {
                pairs.append(("logprob", .number(Double(lp.chosen))))
                pairs.append(("top_logprobs", .array(lp.top.map { .array([.int(Int($0.0)), .number(Double($0.1))]) })))
            }
            return .object(pairs)
        case .finished(let id, let reason, let message, let u):
            return .object([
                ("id", .int(id)), ("finish", .string(reason.rawValue)),
                ("message", message.map { .string($0) } ?? .null),
                ("usage", .object([
                    ("prompt_tokens", .int(u.promptTokens)), ("completion_tokens", .int(u.completionTokens)),
                    ("cached_tokens", .int(u.cachedTokens)), ("ttft_ms", .number(u.timeToFirstTokenMs)),
                    ("prompt_ms", .number(u.promptMs)), ("generation_ms", .number(u.generationMs)),
                    ("drafted_tokens", .int(u.draftedTokens)), ("accepted_tokens", .int(u.acceptedTokens)),
                ])),
            ])
        }
    }
}
