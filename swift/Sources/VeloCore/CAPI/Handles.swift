#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The C ABI's bookkeeping: live handles and the per-thread last error.
/// Handles are checked against the live set, so a stale or bogus pointer from the caller gets
/// an error code instead of crashing the host process.
enum CABI {
    private static var lock = pthread_mutex_t()
    private static var lockReady: Bool = {
        pthread_mutex_init(&lock, nil)
        return true
    }()
    private static var live: [UInt: AnyObject] = [:]

    private static func withLock<T>(_ body: () -> T) -> T {
        _ = lockReady
        pthread_mutex_lock(&lock)
        defer { pthread_mutex_unlock(&lock) }
        return body()
    }

    static func register(_ obj: AnyObject) -> UnsafeMutableRawPointer {
        let p = Unmanaged.passRetained(obj).toOpaque()
        withLock { live[UInt(bitPattern: p)] = obj }
        return p
    }

    static func lookup<T: AnyObject>(_ p: UnsafeMutableRawPointer?, as: T.Type) throws -> T {
        guard let p else { throw VeloError(.invalidArgument, "null handle") }
        let obj = withLock { live[UInt(bitPattern: p)] }
        guard let typed = obj as? T else {
            throw VeloError(.invalidArgument, "invalid or closed \(T.self) handle")
        }
        return typed
    }

    @discardableResult
    static func release(_ p: UnsafeMutableRawPointer?) -> Bool {
        guard let p else { return false }
        let found = withLock { live.removeValue(forKey: UInt(bitPattern: p)) != nil }
        if found { Unmanaged<AnyObject>.fromOpaque(p).release() }
        return found
    }

    // MARK: last error (per thread)

    private static let errorKey: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key) { free($0) }
        return key
    }()

    static func setError(_ message: String) {
        if let old = pthread_getspecific(errorKey) { free(old) }
        pthread_setspecific(errorKey, strdup(message))
    }

    static var lastError: UnsafePointer<CChar>? {
        pthread_getspecific(errorKey).map { UnsafePointer($0.assumingMemoryBound(to: CChar.self)) }
    }

    /// Runs an entry point's body: 0 on success, the error's code (and message) otherwise.
    static func call(_ body: () throws -> Void) -> Int32 {
        do {
            try body()
            return 0
        } catch let e as VeloError {
            setError(e.message)
            return e.code.rawValue
        } catch {
            setError("\(error)")
            return VeloError.Code.internalError.rawValue
        }
    }
}

/// Copies bytes into a caller buffer. When it is too small, reports the size needed in
/// `outLen` and fails with `.bufferTooSmall` so the caller can retry.
func copyOut<C: Collection>(_ data: C, _ out: UnsafeMutablePointer<C.Element>?, _ cap: Int, _ outLen: UnsafeMutablePointer<Int64>?) throws {
    outLen?.pointee = Int64(data.count)
    guard data.count <= cap else {
        throw VeloError(.bufferTooSmall, "buffer of \(cap) items is too small, \(data.count) needed")
    }
    if !data.isEmpty {
        guard let out else { throw VeloError(.invalidArgument, "null output buffer") }
        _ = UnsafeMutableBufferPointer(start: out, count: cap).initialize(from: data)
    }
}
