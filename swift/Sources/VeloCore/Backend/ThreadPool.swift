import CRuntime
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Swift face of the C worker pool: `run { ith, nth in … }` executes the body on every
/// thread (the caller included) and returns when all are done.
public final class ThreadPool: @unchecked Sendable {
    private let pool: OpaquePointer?
    public let size: Int

    static let minParallelWork = 1 << 16

    public init(threads: Int) {
        size = max(1, threads)
        pool = vr_pool_create(Int32(size))
    }

    deinit { vr_pool_destroy(pool) }

    private final class Box {
        let body: (Int, Int) -> Void
        init(_ body: @escaping (Int, Int) -> Void) { self.body = body }
    }

    /// `work`: a rough cost (e.g. multiply-adds). Small jobs run on the caller alone: waking
    /// workers costs more than they save, and much more when the machine is oversubscribed.
    public func run(work: Int = .max, _ body: @escaping (Int, Int) -> Void) {
        if size == 1 || work < ThreadPool.minParallelWork { body(0, 1); return }
        let box = Unmanaged.passRetained(Box(body))
        vr_pool_run(pool, { ctx, ith, nth in
            Unmanaged<Box>.fromOpaque(ctx!).takeUnretainedValue().body(Int(ith), Int(nth))
        }, box.toOpaque())
        box.release()
    }

    /// Splits 0..<count into one contiguous share per thread, in multiples of `align`.
    public static func share(_ count: Int, _ ith: Int, _ nth: Int, align: Int = 1) -> Range<Int> {
        let units = (count + align - 1) / align
        let per = (units + nth - 1) / nth
        let lo = min(count, ith * per * align)
        let hi = min(count, (ith + 1) * per * align)
        return lo..<hi
    }
}

public func nowNanos() -> UInt64 { vr_now_ns() }
public func cpuCount() -> Int { Int(vr_cpu_count()) }

/// Runs `body` on a new detached thread; false (and nothing run) if none could be started.
func detachThread(_ body: @escaping () -> Void) -> Bool {
    let box = Unmanaged.passRetained(DetachedBody(body))
    // pthread_t is an integer on Linux and a pointer on Darwin; the start routine's argument is
    // optional on one and not the other: both go through detachedThreadMain
    #if canImport(Darwin)
    var t: pthread_t?
    #else
    var t = pthread_t()
    #endif
    guard pthread_create(&t, nil, { detachedThreadMain($0) }, box.toOpaque()) == 0 else {
        box.release()
        return false
    }
    #if canImport(Darwin)
    pthread_detach(t!)
    #else
    pthread_detach(t)
    #endif
    return true
}

private final class DetachedBody {
    let body: () -> Void
    init(_ body: @escaping () -> Void) { self.body = body }
}

private func detachedThreadMain(_ arg: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    Unmanaged<DetachedBody>.fromOpaque(arg!).takeRetainedValue().body()
    return nil
}
