/// A layer's feed-forward block, read and run the same way in every model: one gated MLP, or a
/// mixture of experts (with its shared expert where the file has one).
enum FeedForward {
    case dense(gate: WeightMatrix, up: WeightMatrix, down: WeightMatrix)
    case experts(ExpertLayer)

    /// blk.N.'s block: the experts where the config has them (and not `dense`), else ffn_gate / ffn_up / ffn_down
    /// `width` wide (default `ffnDim`),
    /// or Phi-3's fused gate|up as ffn_up (a view of each half's rows).
    init(_ w: WeightLoader, prefix p: String, _ c: ModelConfig, dense: Bool = false, width: Int? = nil) throws {
        if let e = c.experts, !dense {
            self = .experts(try ExpertLayer(w, prefix: p, c, e))
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
        }
    }

    var experts: ExpertLayer? { if case let .experts(e) = self { e } else { nil } }

    var gatedPair: (WeightMatrix, WeightMatrix)? { if case let .dense(gate, up, _) = self { (gate, up) } else { nil } }

    /// The block on .xn, its output in .xn (a dense block's hidden rows in .gate).
    func run(_ ops: ForwardOps, _ activation: ModelConfig.FFNActivation) {
        switch self {
        case let .dense(gate, up, down):
            ops.gatedUp(.xn, gate: gate, up: up, activation)
            ops.matmul(.gate, [(down, .xn)])
        case let .experts(e):
            ops.experts(.xn, e, into: .xn)
        }
    }
}
