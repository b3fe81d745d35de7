import CKernels
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A mixture-of-experts FFN's shape and routing, as llama.cpp's `build_moe_ffn` does it: the
/// router's logits, a softmax over all experts, the `used` most probable, their probabilities
/// as weights (renormalised to sum 1 where `normalizeWeights`), each chosen expert a gated MLP
/// of `ffnDim`, the weighted sum of their outputs, plus a shared expert where there is one.
public struct Experts: Sendable {
    public var count: Int
    public var used: Int
    public var ffnDim: Int
    /// Divide the chosen experts' weights by their sum (Mixtral, Qwen3-MoE; not Qwen2-MoE).
    public var normalizeWeights = true
    /// A shared expert of this width runs on every token, its output scaled by
    /// sigmoid(ffn_gate_inp_shexp · x) (Qwen2-MoE) or, without `sharedGated`, added as it is
    /// (DeepSeek's shared experts, one MLP of their summed width); 0: none.
    public var sharedFFNDim = 0
    public var sharedGated = true
    /// The chosen weights are multiplied by this after any renormalising (DeepSeek's
    /// expert_weights_scale).
    public var weightsScale: Float = 1
    /// ffn_exp_probs_b.bias: a per-expert bias added to the probabilities for the choice
    /// only, not to the weights (DeepSeek-V3, GLM-4.7-Flash).
    public var selectionBias = false
    /// DeepSeek's grouped routing: experts in `count` equal groups, the choice limited to the
    /// `used` groups whose two best experts score highest (nil: one group).
    public var groups: (count: Int, used: Int)?
    /// How the router's logits become weights.
    public enum Gating: Sendable {
        /// a softmax over all experts, the chosen ones' probabilities (Mixtral, Qwen)
        case softmax
        /// the `used` largest logits, then a softmax over those alone (gpt-oss)
        case softmaxChosen
        /// a sigmoid of each logit (DeepSeek-V3, GLM-4.7-Flash)
        case sigmoid
    }
    public var gating = Gating.softmax
    /// The experts' gated activation.
    public enum GLU: Sendable, Equatable {
        case swiglu
        /// gpt-oss's: gate clamped above at `limit`, up to ±limit, gate·σ(α·gate)·(up + 1)
        case swigluClamped(alpha: Float, limit: Float)
        /// tanh-GELU(gate)·up (Gemma 4)
        case geglu
    }
    public var glu = GLU.swiglu
    /// Gemma 4: each layer with experts runs a dense MLP of `ModelConfig.ffnDim` beside them,
    /// each with norms of its own, and routes by rmsnorm(x)/√dim · ffn_gate_inp.scale of the
    /// block's input rather than the experts' input; each expert's output is scaled by its
    /// ffn_down_exps.scale.
    public var mlpBeside = false
    /// The router and every expert's gate, up and down products carry biases (gpt-oss).
    public var biases = false
}

/// One layer's expert weights: the router (`ffn_gate_inp`, one row per expert) and each
/// expert's gate, up and down as views into llama.cpp's stacked `ffn_*_exps` tensors, so a
/// token reads only the experts it was routed to.
struct ExpertLayer {
    struct Shared {
        let gate, up, down: WeightMatrix
        /// ffn_gate_inp_shexp: the shared expert's scale is sigmoid(gateInput · x) (nil: 1).
        let gateInput: WeightVector?
    }

    /// Biases (`Experts.biases`): the router's, and the experts' stacked as [width, experts]
    /// (expert j's at j·width).
    struct Biases {
        let router, gate, up, down: WeightVector
    }

    let router: WeightMatrix
    let gate, up, down: [WeightMatrix]
    let shared: Shared?
    let biases: Biases?
    /// ffn_exp_probs_b.bias (`Experts.selectionBias`).
    let selectionBias: WeightVector?
    /// Gemma 4 (`Experts.mlpBeside`): ffn_gate_inp.scale, already divided by √dim: the router
    /// reads rmsnorm(its input) times this.
    let routerScale: WeightVector?
    /// Gemma 4: ffn_down_exps.scale, one factor an expert on its output.
    let downScale: WeightVector?

    init(_ w: WeightLoader, prefix p: String, _ c: ModelConfig, _ e: Experts) throws {
        router = try w.matrix(p + "ffn_gate_inp.weight", rows: e.count, cols: c.dim)
        // gate and up stacked as one tensor (Gemma 4's converter): each expert's first rows, then the others
        if w.gguf.tensor(p + "ffn_gate_up_exps.weight") != nil {
            let both = try w.experts(p + "ffn_gate_up_exps.weight", count: e.count, rows: 2 * e.ffnDim, cols: c.dim)
            (gate, up) = (both.map { $0.rows(0, e.ffnDim) }, both.map { $0.rows(e.ffnDim, e.ffnDim) })
        } else {
            gate = try w.experts(p + "ffn_gate_exps.weight", count: e.count, rows: e.ffnDim, cols: c.dim)
            up = try w.experts(p + "ffn_up_exps.weight", count: e.count, rows: e.ffnDim, cols: c.dim)
        }
        down = try w.experts(p + "ffn_down_exps.weight", count: e.count, rows: c.dim, cols: e.ffnDim)
        shared = e.sharedFFNDim == 0 ? nil : Shared(
            gate: try w.matrix(p + "ffn_gate_shexp.weight", rows: e.sharedFFNDim, cols: c.dim),
            up: try w.matrix(p + "ffn_up_shexp.weight", rows: e.sharedFFNDim, cols: c.dim),
            down: try w.matrix(p + "ffn_down_shexp.weight", rows: c.dim, cols: e.sharedFFNDim),
            gateInput: e.sharedGated ? try w.vector(p + "ffn_gate_inp_shexp.weight", count: c.dim) : nil)
        biases = !e.biases ? nil : Biases(
            router: try w.vector(p + "ffn_gate_inp.bias", count: e.count),
            gate: try w.vector(p + "ffn_gate_exps.bias", count: e.ffnDim * e.count),
            up: try w.vector(p + "ffn_up_exps.bias", count: e.ffnDim * e.count),
            down: try w.vector(p + "ffn_down_exps.bias", count: c.dim * e.count))
        selectionBias = e.selectionBias ? try w.vector(p + "exp_probs_b.bias", count: e.count) : nil
        if e.mlpBeside {
            let s = try w.vector(p + "ffn_gate_inp.scale", count: c.dim)
            routerScale = WeightVector(name: s.name, values: s.values.map { $0 / Float(c.dim).squareRoot() })
            downScale = try w.vector(p + "ffn_down_exps.scale", count: e.count)
        } else {
            (routerScale, downScale) = (nil, nil)
        }
    }

    var vectors: [WeightVector] {
        var all = (shared?.gateInput.map { [$0] } ?? []) + (biases.map { [$0.router, $0.gate, $0.up, $0.down] } ?? [])
        all += [selectionBias, routerScale, downScale].compactMap { $0 }
        return all
    }

    var matrices: [WeightMatrix] {
        [router] + gate + up + down + (shared.map { [$0.gate, $0.up, $0.down] } ?? [])
    }
}

/// Which experts each token goes to, grouped by expert: for expert e, the batch rows routed to
/// it and each row's weight (prefill then runs one product per expert over its rows).
struct ExpertRoutes {
    var rows: [[Int]]
    var weights: [[Float]]

    /// Routes `tokens` rows of router logits (`e.count` each; overwritten by their softmax
    /// or sigmoid where the gating is `.softmax` or `.sigmoid`), choosing by them plus `bias`.
    init(logits: UnsafeMutablePointer<Float>, tokens: Int, _ e: Experts, bias: [Float]? = nil) {
        rows = Array(repeating: [], count: e.count)
        weights = Array(repeating: [], count: e.count)
        var chosen = [Int](repeating: 0, count: e.used)
        var w = [Float](repeating: 0, count: e.used)
        var score = [Float](repeating: 0, count: e.count)
        for t in 0..<tokens {
            let p = logits + t * e.count
            switch e.gating {
            case .softmax: ck_softmax(p, Int64(e.count))
            case .sigmoid: for j in 0..<e.count { p[j] = 1 / (1 + expf(-p[j])) }
            case .softmaxChosen: break
            }
            for j in 0..<e.count { score[j] = p[j] + (bias?[j] ?? 0) }
            if let g = e.groups { Self.keepBestGroups(&score, g) }
            // the `used` best scores, best first (ties: the lower expert)
            for k in 0..<e.used {
                var best = -1
                for j in 0..<e.count where !chosen[0..<k].contains(j) && (best < 0 || score[j] > score[best]) { best = j }
                chosen[k] = best
                w[k] = p[best]
            }
            if e.gating == .softmaxChosen { w.withUnsafeMutableBufferPointer { ck_softmax($0.baseAddress, Int64(e.used)) } }
            if e.normalizeWeights {
                // as llama.cpp: the sum clamped to float16's smallest normal
                let sum = max(w.reduce(0, +), 6.103515625e-5)
                for k in 0..<e.used { w[k] /= sum }
            }
            if e.weightsScale != 1 { for k in 0..<e.used { w[k] *= e.weightsScale } }
            for k in 0..<e.used {
                rows[chosen[k]].append(t)
                weights[chosen[k]].append(w[k])
            }
        }
    }
}

extension ExpertRoutes {
    /// -∞ for every expert outside the `g.used` groups whose two best scores sum highest
    /// (llama.cpp's build_moe_ffn; ties: the lower group).
    static func keepBestGroups(_ score: inout [Float], _ g: (count: Int, used: Int)) {
        let size = score.count / g.count
        let groupScore = (0..<g.count).map { i -> Float in
            let s = score[i * size..<(i + 1) * size].sorted(by: >)
            return s[0] + (s.count > 1 ? s[1] : 0)
        }
        let keep = Set((0..<g.count).sorted { groupScore[$0] > groupScore[$1] || (groupScore[$0] == groupScore[$1] && $0 < $1) }.prefix(g.used))
        for i in 0..<g.count where !keep.contains(i) {
            for j in i * size..<(i + 1) * size { score[j] = -.infinity }
        }
    }
}

/// Scratch for the CPU's expert FFN, `maxTokens` rows each (none for a dense model).
struct ExpertScratch {
    /// Router logits, then probabilities.
    let router: UnsafeMutablePointer<Float>
    /// One expert's input rows, gathered; its output rows; the layer's weighted sum.
    let input, output, sum: UnsafeMutablePointer<Float>

    init?(_ c: ModelConfig, maxTokens: Int) {
        guard let e = c.experts else { return nil }
        router = .allocate(capacity: maxTokens * e.count)
        input = .allocate(capacity: maxTokens * c.dim)
        output = .allocate(capacity: maxTokens * c.dim)
        sum = .allocate(capacity: maxTokens * c.dim)
    }

    static func floats(_ c: ModelConfig, maxTokens: Int) -> Int {
        c.experts.map { maxTokens * ($0.count + 3 * c.dim) } ?? 0
    }

    func deallocate() {
        for p in [router, input, output, sum] { p.deallocate() }
    }
}

extension TransformerOps {
    /// y = the expert FFN of `rows` rows of x (y may be x). Each expert with tokens routed to
    /// it runs once over all of them: gather their rows, gate/up product, SwiGLU, down
    /// product, then add each row times its weight back to its token.
    /// `router`: the rows the router reads (x itself but for Gemma 4's).
    func experts(_ x: UnsafePointer<Float>, rows n: Int, _ l: ExpertLayer, router: UnsafePointer<Float>, into y: UnsafeMutablePointer<Float>, ws: Workspace) {
        let c = config, e = c.experts!, d = c.dim, h = e.ffnDim
        let s = ws.experts!
        if let scale = l.routerScale {
            // s.input is free until the first expert gathers its rows
            rmsNorm(router, scale, rows: n, n: d, into: s.input)
            matmul(s.input, rows: n, [(l.router, s.router)], ws: ws)
        } else {
            matmul(router, rows: n, [(l.router, s.router)], ws: ws)
        }
        let b = l.biases
        if let b { addRows(s.router, rows: n, b.router.values[...]) }
        let routes = profiler.measure(.other) { () -> ExpertRoutes in
            s.sum.update(repeating: 0, count: n * d)
            return ExpertRoutes(logits: s.router, tokens: n, e, bias: l.selectionBias?.values)
        }
        for j in 0..<e.count where !routes.rows[j].isEmpty {
            let picked = routes.rows[j], k = picked.count
            profiler.measure(.other) {
                for (i, r) in picked.enumerated() { (s.input + i * d).update(from: x + r * d, count: d) }
            }
            matmul(s.input, rows: k, [(l.gate[j], ws.gate), (l.up[j], ws.up)], ws: ws)
            if let b {
                addRows(ws.gate, rows: k, b.gate.values[j * h..<(j + 1) * h])
                addRows(ws.up, rows: k, b.up.values[j * h..<(j + 1) * h])
            }
            glu(e.glu, rows: k, width: h, ws: ws)
            matmul(ws.gate, rows: k, [(l.down[j], s.output)], ws: ws)
            if let b { addRows(s.output, rows: k, b.down.values[j * d..<(j + 1) * d]) }
            let scale = l.downScale?.values[j] ?? 1
            profiler.measure(.other) {
                for (i, r) in picked.enumerated() { ck_axpy_f32(routes.weights[j][i] * scale, s.output + i * d, s.sum + r * d, Int64(d)) }
            }
        }
        if let sh = l.shared {
            matmul(x, rows: n, [(sh.gate, ws.gate), (sh.up, ws.up)], ws: ws)
            swiglu(rows: n, width: e.sharedFFNDim, ws: ws)
            matmul(ws.gate, rows: n, [(sh.down, s.output)], ws: ws)
            profiler.measure(.other) {
                guard let gate = sh.gateInput else {
                    addInPlace(s.sum, s.output, count: n * d)
                    return
                }
                gate.values.withUnsafeBufferPointer { g in
                    for r in 0..<n {
                        let scale = 1 / (1 + expf(-ck_dot_f32(g.baseAddress, x + r * d, Int64(d))))
                        ck_axpy_f32(scale, s.output + r * d, s.sum + r * d, Int64(d))
                    }
                }
            }
        }
        y.update(from: s.sum, count: n * d)
    }

    /// ws.gate = silu(ws.gate) * ws.up over `rows` rows of `width`.
    private func swiglu(rows: Int, width: Int, ws: Workspace) {
        glu(.swiglu, rows: rows, width: width, ws: ws)
    }

    /// ws.gate = the experts' activation of ws.gate and ws.up, `rows` rows of `width`.
    private func glu(_ glu: Experts.GLU, rows: Int, width: Int, ws: Workspace) {
        profiler.measure(.mlpActivation) {
            switch glu {
            case .swiglu:
                for r in 0..<rows { ck_swiglu(ws.gate + r * width, ws.up + r * width, ws.gate + r * width, Int64(width)) }
            case let .swigluClamped(alpha, limit):
                ck_swiglu_clamped(ws.gate, ws.up, ws.gate, Int64(rows * width), alpha, limit)
            case .geglu:
                ck_geglu(ws.gate, ws.up, ws.gate, Int64(rows * width))
            }
        }
    }

    /// Adds `bias` to each of `rows` rows of its length.
    private func addRows(_ x: UnsafeMutablePointer<Float>, rows: Int, _ bias: ArraySlice<Float>) {
        profiler.measure(.other) {
            bias.withUnsafeBufferPointer { bp in
                for r in 0..<rows { ck_add_f32(x + r * bp.count, bp.baseAddress, x + r * bp.count, Int64(bp.count)) }
            }
        }
    }
}
