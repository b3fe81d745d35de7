/// How the hidden states of a prompt become one embedding vector: the GGUF's
/// `{arch}.pooling_type`, llama.cpp's enum (0 none, 1 mean, 2 cls, 3 last, 4 rank).
public enum Pooling: String, Sendable {
    case mean, cls, last

    /// The pooling of a model whose file says `type` (nil: no key). No key and 0 ("none":
    /// per-token vectors, which llama.cpp's /v1/embeddings refuses) become the last token's
    /// vector, as node-llama-cpp gives for such models: for a causal decoder the last position
    /// is the only one that has seen the whole input. Rank (a reranker's classification head)
    /// is refused.
    init(ggufType type: Int?) throws {
        switch type ?? 0 {
        case 0, 3: self = .last
        case 1: self = .mean
        case 2: self = .cls
        case 4: throw VeloError(.unsupported, "this model's pooling type is rank (a reranker's classification head), which Velo does not run: it gives no embeddings")
        case let t: throw VeloError(.unsupported, "this model's pooling type \(t) is unknown (llama.cpp's are 0 none, 1 mean, 2 cls, 3 last, 4 rank)")
        }
    }

    /// Whether the position's final hidden state is part of the pool, for a prompt of `count` tokens.
    func wants(position: Int, count: Int) -> Bool {
        switch self {
        case .mean: return true
        case .cls: return position == 0
        case .last: return position == count - 1
        }
    }
}

/// An embedding request's pool as its prompt goes through the model chunk by chunk: the
/// final-norm hidden states of the positions the pooling wants, summed in double precision.
final class EmbeddingPool {
    let pooling: Pooling
    private var sum: [Double]
    private var rows = 0

    init(pooling: Pooling, dim: Int) {
        self.pooling = pooling
        sum = [Double](repeating: 0, count: dim)
    }

    func add(_ row: UnsafePointer<Float>) {
        for j in sum.indices { sum[j] += Double(row[j]) }
        rows += 1
    }

    /// Forgets what was added (the sequence was preempted and starts over).
    func reset() {
        for j in sum.indices { sum[j] = 0 }
        rows = 0
    }

    /// The pooled vector, L2-normalised (llama.cpp's server default, embd_normalize 2); a zero
    /// vector stays zero.
    var vector: [Float] {
        let n = Double(max(rows, 1))
        let pooled = sum.map { $0 / n }
        let norm = pooled.reduce(0) { $0 + $1 * $1 }.squareRoot()
        let scale = norm > 0 ? 1 / norm : 0
        return pooled.map { Float($0 * scale) }
    }
}
