/// Gemma 4 (text: E2B, E4B, 31B, 26B-A4B), as llama.cpp's gemma4 graph: Gemma 3's block with sliding
/// and global layers of their own head widths and K/V head counts (`key_length_swa`, a
/// `head_count_kv` a layer), V RMS-normed per head and, where a layer has no V projection,
/// K's product; attention unscaled (the Q/K norms do it); global layers turn RoPE over their
/// whole head with `rope_freqs` factors that leave all but the first pairs still
/// ("proportional" RoPE), sliding ones at `rope.freq_base_swa` over `rope.dimension_count_swa`;
/// the last `shared_kv_layers` layers attend over the K/V of the last own layer of their kind;
/// per-layer embeddings (E2B/E4B) and a scale on each layer's output; 26B-A4B's experts beside
/// a dense MLP (Experts.mlpBeside). Norm gains are
/// stored as they are applied (the converter adds no 1 for Gemma 4).
enum Gemma4: Architecture {
    static let layerTensors: LayerTensors = [.qkNorm, .postNorms]

    static func configure(_ c: inout ModelConfig, _ m: Metadata, _ w: WeightLoader, contextSize: Int) throws {
        let path = m.gguf.file.path
        if m.int("expert_count") ?? 0 > 0 {
            // 26B-A4B: a dense MLP beside the experts in each layer (FeedForward.mixed), routed
            // by a softmax over all experts, the chosen ones' weights renormalised, GELU experts
            try c.readExperts(m, ownWidth: true)
            c.experts!.glu = .geglu
            c.experts!.mlpBeside = true
            guard c.qDim >= c.dim else {
                throw VeloError(.unsupported, "\(path): Gemma 4 experts with query rows (\(c.qDim)) narrower than the model (\(c.dim)), which Velo does not run")
            }
        }
        guard let flags = m.gguf["\(m.arch).attention.sliding_window_pattern"]?.array?.map(\.bool), flags.count == c.layers,
              flags.allSatisfy({ $0 != nil }) else {
            throw VeloError(.invalidFile, "\(path): \(m.arch).attention.sliding_window_pattern must hold one flag a layer (\(c.layers))")
        }
        let sliding = flags.map { $0! }
        c.ropeStyle = .neox
        c.activation = .geluTanh
        c.embeddingScale = Float(c.dim).squareRoot()
        c.finalSoftcap = Float(m.double("final_logit_softcapping") ?? 0)
        c.attentionScale = 1
        c.valueNorm = true
        c.perLayerWidth = m.int("embedding_length_per_layer_input") ?? 0

        // heads: the global width is key_length (headDim), the sliding one key_length_swa
        let swaDim = m.int("attention.key_length_swa") ?? c.headDim
        guard (m.int("attention.value_length_swa") ?? swaDim) == swaDim else {
            throw VeloError(.invalidFile, "\(path): Gemma 4's sliding layers need value heads as wide as their key heads")
        }
        let kv = try m.perLayer("attention.head_count_kv", layers: c.layers) ?? Array(repeating: c.kvHeads, count: c.layers)
        c.layerHeads = (0..<c.layers).map { HeadShape(heads: c.heads, kvHeads: kv[$0], headDim: sliding[$0] ? swaDim : c.headDim) }
        c.kvHeads = kv.max()!

        let window = try m.required("attention.sliding_window")
        c.slidingWindow(window) { sliding[$0] }
        let swaRopeDim = m.int("rope.dimension_count_swa") ?? c.ropeDim
        guard swaRopeDim <= swaDim, swaRopeDim % 2 == 0 else {
            throw VeloError(.invalidFile, "\(path): rope dimension \(swaRopeDim) does not fit sliding heads of \(swaDim)")
        }
        c.ropes.append(Rope(base: m.double("rope.freq_base_swa") ?? 10000, dims: swaRopeDim))
        c.layerRope = sliding.map { $0 ? 1 : 0 }

        // the shared layers read the last own layer of their kind: llama.cpp takes the one
        // before last for a sliding layer and the last for a global one
        let shared = m.int("attention.shared_kv_layers") ?? 0, own = c.layers - shared
        guard shared >= 0, own >= 1 else { throw VeloError(.invalidFile, "\(path): \(shared) K/V-sharing layers of \(c.layers)") }
        if shared > 0 {
            c.kvSource = try (0..<c.layers).map { l in
                guard l >= own else { return l }
                let source = own - (sliding[l] ? 2 : 1)
                guard source >= 0, sliding[source] == sliding[l] else {
                    throw VeloError(.unsupported, "\(path): layer \(l) would share the K/V of layer \(source), which is not of its kind")
                }
                return source
            }
            c.kvLayers = own
        }
    }
}
