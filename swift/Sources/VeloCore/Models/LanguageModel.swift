/// What the engine needs of an architecture: its shape and one batched forward pass that
/// writes K/V into pages and logits for `batch.logitRows` into the workspace.
protocol LanguageModel: AnyObject {
    var config: ModelConfig { get }
    func forward(_ batch: ForwardBatch, kv: KVView, ops: TransformerOps, ws: Workspace)
}

/// One file per architecture; this table picks it from `general.architecture`.
func loadLanguageModel(_ file: ModelFile) throws -> LanguageModel {
    switch file.gguf.architecture {
    case "llama": return try LlamaModel(file: file)
    default: _ = try ModelConfig(gguf: file.gguf) // throws the "not supported" error
    }
    throw VeloError(.unsupported, "\(file.path): unsupported architecture")
}
