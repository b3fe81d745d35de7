/// Every failure the engine reports. The C ABI turns `code` into the integer status
/// a call returns and `message` into what `velo_last_error()` says.
public struct VeloError: Error, CustomStringConvertible {
    public enum Code: Int32 {
        case invalidArgument = 1
        case io = 2
        case invalidFile = 3
        case unsupported = 4
        case bufferTooSmall = 5
        case outOfMemory = 6
        case contextOverflow = 7
        case internalError = 8
    }

    public let code: Code
    public let message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }

    static func invalidFile(_ msg: String) -> VeloError { VeloError(.invalidFile, msg) }
    static func invalidArgument(_ msg: String) -> VeloError { VeloError(.invalidArgument, msg) }
    static func unsupported(_ msg: String) -> VeloError { VeloError(.unsupported, msg) }
}
