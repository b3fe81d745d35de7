#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The whole C ABI of libVelo. Conventions:
// - every call that can fail returns an Int32 status (0 = ok, else VeloError.Code) and leaves
//   a message for velo_last_error() on the calling thread;
// - objects cross as opaque handles; strings and arrays cross as caller-owned buffers with a
//   capacity and an out-length (a too-small buffer fails with code 5 and reports the size needed);
// - nothing Swift-typed crosses.

public let veloVersion = "0.1.0"
private let versionCString = strdup(veloVersion)!

/// Bumped whenever a signature below changes.
@_cdecl("velo_abi_version")
public func velo_abi_version() -> Int32 { 3 }

@_cdecl("velo_version")
public func velo_version() -> UnsafePointer<CChar> { UnsafePointer(versionCString) }

/// The message of the last failed call on this thread (empty if none). Valid until the next call.
@_cdecl("velo_last_error")
public func velo_last_error() -> UnsafePointer<CChar>? {
    CABI.lastError ?? UnsafePointer(emptyCString)
}
private let emptyCString = strdup("")!

// MARK: models

/// Opens a GGUF file (mmap; a CPU engine later moves the bytes into anonymous memory in place). Writes a handle to `out`.
@_cdecl("velo_model_open")
public func velo_model_open(_ path: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<UnsafeMutableRawPointer?>?) -> Int32 {
    CABI.call {
        guard let path, let out else { throw VeloError(.invalidArgument, "null argument to velo_model_open") }
        out.pointee = nil
        let model = try ModelFile(path: String(cString: path))
        out.pointee = CABI.register(model)
    }
}

@_cdecl("velo_model_close")
public func velo_model_close(_ h: UnsafeMutableRawPointer?) -> Int32 {
    CABI.call {
        guard CABI.release(h) else { throw VeloError(.invalidArgument, "invalid or closed model handle") }
    }
}

/// The model's description as UTF-8 JSON (see ModelFile.infoJSON).
@_cdecl("velo_model_info")
public func velo_model_info(_ h: UnsafeMutableRawPointer?, _ out: UnsafeMutablePointer<UInt8>?, _ cap: Int64, _ outLen: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call {
        let model = try CABI.lookup(h, as: ModelFile.self)
        try copyOut(Array(model.infoJSON().serialized.utf8), out, Int(cap), outLen)
    }
}

/// Checks every tensor's values for NaN and infinity (ModelFile.checkTensors): code 3 names the
/// first damaged tensor. Reads the whole file once.
@_cdecl("velo_model_check_tensors")
public func velo_model_check_tensors(_ h: UnsafeMutableRawPointer?) -> Int32 {
    CABI.call {
        try CABI.lookup(h, as: ModelFile.self).checkTensors()
    }
}

// MARK: tokenizer

public let VELO_TOKENIZE_ADD_SPECIAL: UInt32 = 1
public let VELO_TOKENIZE_PARSE_SPECIAL: UInt32 = 2
public let VELO_DETOKENIZE_REMOVE_SPECIAL: UInt32 = 1
public let VELO_DETOKENIZE_RENDER_SPECIAL: UInt32 = 2

/// UTF-8 text → token ids. Invalid UTF-8 is replaced by U+FFFD before tokenizing.
@_cdecl("velo_tokenize")
public func velo_tokenize(_ h: UnsafeMutableRawPointer?, _ text: UnsafePointer<UInt8>?, _ textLen: Int64, _ flags: UInt32,
                          _ out: UnsafeMutablePointer<Int32>?, _ cap: Int64, _ outCount: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call {
        let tok = try CABI.lookup(h, as: ModelFile.self).requireTokenizer()
        guard textLen >= 0, textLen == 0 || text != nil else { throw VeloError(.invalidArgument, "invalid text buffer") }
        let s = textLen == 0 ? "" : String(decoding: UnsafeBufferPointer(start: text, count: Int(textLen)), as: UTF8.self)
        let ids = tok.encode(s, addSpecial: flags & VELO_TOKENIZE_ADD_SPECIAL != 0,
                             parseSpecial: flags & VELO_TOKENIZE_PARSE_SPECIAL != 0)
        try copyOut(ids, out, Int(cap), outCount)
    }
}

/// Token ids → UTF-8 bytes.
@_cdecl("velo_detokenize")
public func velo_detokenize(_ h: UnsafeMutableRawPointer?, _ tokens: UnsafePointer<Int32>?, _ n: Int64, _ flags: UInt32,
                            _ out: UnsafeMutablePointer<UInt8>?, _ cap: Int64, _ outLen: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call {
        let tok = try CABI.lookup(h, as: ModelFile.self).requireTokenizer()
        guard n >= 0, n == 0 || tokens != nil else { throw VeloError(.invalidArgument, "invalid token buffer") }
        let ids = n == 0 ? [] : Array(UnsafeBufferPointer(start: tokens, count: Int(n)))
        let bytes = try tok.decode(ids, removeSpecial: flags & VELO_DETOKENIZE_REMOVE_SPECIAL != 0,
                                   renderSpecial: flags & VELO_DETOKENIZE_RENDER_SPECIAL != 0)
        try copyOut(bytes, out, Int(cap), outLen)
    }
}

/// One token's text, as a listing of pieces shows it.
@_cdecl("velo_token_piece")
public func velo_token_piece(_ h: UnsafeMutableRawPointer?, _ token: Int32,
                             _ out: UnsafeMutablePointer<UInt8>?, _ cap: Int64, _ outLen: UnsafeMutablePointer<Int64>?) -> Int32 {
    CABI.call {
        let tok = try CABI.lookup(h, as: ModelFile.self).requireTokenizer()
        try copyOut(try tok.piece(token), out, Int(cap), outLen)
    }
}
