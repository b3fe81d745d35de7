/// Where the time of forward passes goes, by kind of op (enabled with the engine option
/// `profile`; off by default, when it costs one branch per op).
public final class Profiler: @unchecked Sendable {
    public enum Op: Int, CaseIterable {
        case quantize, matmul, attention, norm, rope, mlpActivation, embed, output, other
        /// GPU backends: host time spent recording a step, and waiting for it
        case record, wait
        /// the engine: sampling and bookkeeping after a forward pass, and whole steps
        case sample, step
        var name: String { "\(self)" }
    }

    public let enabled: Bool
    private var nanos = [UInt64](repeating: 0, count: Op.allCases.count)

    init(enabled: Bool) { self.enabled = enabled }

    @inline(__always)
    func measure<T>(_ op: Op, _ body: () -> T) -> T {
        guard enabled else { return body() }
        let t0 = nowNanos()
        let r = body()
        nanos[op.rawValue] &+= nowNanos() - t0
        return r
    }

    /// Time measured elsewhere (GPU timestamps).
    func add(_ op: Op, nanos: UInt64) {
        self.nanos[op.rawValue] &+= nanos
    }

    /// GPU time by kernel and grid ("matmul_coop_T_q4_0 32x4x1"): which shape of which kernel
    /// is slow, where `Op` only says what kind of op it was.
    private var kernels: [String: (nanos: UInt64, count: Int)] = [:]

    func addKernel(_ label: String, nanos: UInt64) {
        let k = kernels[label] ?? (0, 0)
        kernels[label] = (k.nanos &+ nanos, k.count + 1)
    }

    /// Forgets everything measured so far (benchmarks call it after their warm-up runs).
    func reset() {
        for i in nanos.indices { nanos[i] = 0 }
        kernels.removeAll()
    }

    /// Per-kernel totals, slowest first: {label: {ms, count}}.
    var kernelJSON: JSON {
        .object(kernels.sorted { $0.value.nanos > $1.value.nanos }.map {
            ($0.key, .object([("ms", .number(Double($0.value.nanos) / 1e6)), ("count", .number(Double($0.value.count)))]))
        })
    }


    var json: JSON {
        .object(Op.allCases.map { ($0.name, .number(Double(nanos[$0.rawValue]) / 1e6)) })
    }
}
