/// A layer's feed-forward block, read and run the same way in every model: one gated MLP, or a
/// mixture of experts (with its shared expert where the file has one).
enum FeedForward {
    case dense(gate: WeightMatrix, up: WeightMatrix, down: WeightMatrix)
    case experts(ExpertLayer)
    /// Gemma 4's (`Experts.mlpBeside`): a dense MLP on the block's normed input, normed after,
    /// plus the experts on their own norm of the block's input, normed after.
    case mixed(gate: WeightMatrix, up: WeightMatrix, down: WeightMatrix, postDense: WeightVector,
               preExperts: WeightVector, experts: ExpertLayer, postExperts: WeightVector)

    /// blk.N.'s block: the experts where the config has them (and not `dense`), else ffn_gate / ffn_up / ffn_down
    /// `width` wide (default `ffnDim`),
    /// or Phi-3's fused gate|up as ffn_up (a view of each half's rows).
    init(_ w: WeightLoader, prefix p: String, _ c: ModelConfig, dense: Bool = false, width: Int? = nil) throws {
        if let e = c.experts, !dense, !e.mlpBeside || w.gguf.tensor(p + "ffn_gate_inp.weight") != nil {
            guard e.mlpBeside else {
                self = .experts(try ExpertLayer(w, prefix: p, c, e))
                return
            }
            guard case let .dense(gate, up, down) = try FeedForward(w, prefix: p, c, dense: true, width: width) else { preconditionFailure() }
            self = .mixed(gate: gate, up: up, down: down, postDense: try w.vector(p + "post_ffw_norm_1.weight", count: c.dim),
                          preExperts: try w.vector(p + "pre_ffw_norm_2.weight", count: c.dim), experts: try ExpertLayer(w, prefix: p, c, e),
                          postExperts: try w.vector(p + "post_ffw_norm_2.weight", count: c.dim))
            return
        }
        let f = width ?? c.ffnDim
        let gate, up: WeightMatrix
        if let g = try w.optionalMatrix(p + "ffn_gate.weight", rows: f, cols: c.dim) {
            (gate, up) = (g, try w.matrix(p + "ffn_up.weight", rows: f, cols: c.dim))
        } else {
            let gu = try w.matrix(p + "ffn_up.weight", rows: 2 * f, cols: c.dim)
            (gate, up) = (gu.rows(0, f), gu.rows(f, f))
        }
        self = .dense(gate: gate, up: up, down: try w.matrix(p + "ffn_down.weight", rows: c.dim, cols: f))
    }

    var matrices: [WeightMatrix] {
        switch self {
        case let .dense(gate, up, down): return [gate, up, down]
        case let .experts(e): return e.matrices
        case let .mixed(gate, up, down, _, _, e, _): return [gate, up, down] + e.matrices
        }
    }

    /// The norms of a mixed block (the experts' own vectors are `experts.vectors`).
    var norms: [WeightVector] { if case let .mixed(_, _, _, a, b, _, c) = self { [a, b, c] } else { [] } }

    var experts: ExpertLayer? {
        switch self {
        case .dense: nil
        case let .experts(e), let .mixed(_, _, _, _, _, e, _): e
        }
    }

    var gatedPair: (WeightMatrix, WeightMatrix)? {
        switch self {
        case let .dense(gate, up, _), let .mixed(gate, up, _, _, _, _, _): (gate, up)
        case .experts: nil
        }
    }

    /// The block on .xn, its output in .xn (a dense block's hidden rows in .gate).
    func run(_ ops: ForwardOps, _ activation: ModelConfig.FFNActivation) {
        switch self {
        case let .dense(gate, up, down):
            ops.gatedUp(.xn, gate: gate, up: up, activation)
            ops.matmul(.gate, [(down, .xn)])
        case let .experts(e):
            ops.experts(.xn, e, into: .xn)
        case let .mixed(gate, up, down, postDense, preExperts, e, postExperts):
            // x is the block's input, xn its ffn_norm; the dense part's output waits in .attn
            // (free after the attention's output product; Gemma4 checks it is wide enough)
            ops.gatedUp(.xn, gate: gate, up: up, activation)
            ops.matmul(.gate, [(down, .attn)])
            ops.rmsNorm(.attn, postDense, into: .attn)
            ops.rmsNorm(.x, preExperts, into: .xn)
            ops.experts(.xn, e, routedBy: .x, into: .xn)
            ops.rmsNorm(.xn, postExperts, into: .xn)
            ops.add(.xn, .attn)
        }
    }
}
