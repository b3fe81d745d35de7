/// What the engine needs of an architecture: its shape, its weights (a GPU uploads them
/// once), and its forward pass written in `ForwardOps`, which every backend implements.
protocol LanguageModel: AnyObject {
    var config: ModelConfig { get }
    var matrices: [WeightMatrix] { get }
    var vectors: [WeightVector] { get }
    func forward(_ ops: ForwardOps)
    /// The (gate, up) weight pairs of gated MLPs that `forward` multiplies through
    /// `ForwardOps.gatedUp`: a GPU uploads each pair once, interleaved by rows, for one dispatch.
    var gatedPairs: [(WeightMatrix, WeightMatrix)] { get }
    /// The (Q, K, V) weights of each layer, multiplied through one `ForwardOps.matmul` into
    /// `.q`, `.k`, `.v` in that order: a GPU uploads each triple once, concatenated by rows, for
    /// one dispatch.
    var attentionInputs: [(WeightMatrix, WeightMatrix, WeightMatrix)] { get }
    /// The (Q, K, V) biases of each layer that has all three, added through
    /// `ForwardOps.addBias` (.q, .k, .v in that order) right after that product: a GPU uploads
    /// each triple concatenated, so a decode token's Q|K|V product adds them itself.
    var attentionBiases: [(WeightVector, WeightVector, WeightVector)] { get }
    /// The mixture-of-experts layers `forward` runs through `ForwardOps.experts`: a GPU uploads
    /// each stacked expert tensor once and binds its experts as slices of it.
    var expertLayers: [ExpertLayer] { get }
}

extension LanguageModel {
    var gatedPairs: [(WeightMatrix, WeightMatrix)] { [] }
    var attentionInputs: [(WeightMatrix, WeightMatrix, WeightMatrix)] { [] }
    var attentionBiases: [(WeightVector, WeightVector, WeightVector)] { [] }
    var expertLayers: [ExpertLayer] { [] }
}
