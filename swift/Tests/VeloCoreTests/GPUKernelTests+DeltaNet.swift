import XCTest
@testable import VeloCore

/// The hybrid layers' kernels (deltanet_conv, deltanet_recur, split_query, sigmoid_gate) against
/// float64 references written from llama.cpp's graph (ggml_ssm_conv, ggml_gated_delta_net,
/// build_gdn_l2_norm): two sequences whose rows interleave in the batch, one fresh (position 0:
/// a zero state) and one resuming a state; the value heads tiled and grouped; Qwen3-Next's
/// grouped input rows; the states after the pass.
extension GPUKernelTests {
    private struct Net {
        let kHeads, vHeads, n, taps: Int
        let grouped, groupedValues: Bool
        var keyDim: Int { kHeads * n }
        var valueDim: Int { vHeads * n }
        var convDim: Int { 2 * keyDim + valueDim }
        var r: Int { vHeads / kHeads }
        var stateFloats: Int { (taps - 1) * convDim + vHeads * n * n }
        func keyHead(_ h: Int) -> Int { groupedValues ? h / r : h % kHeads }
        /// Where channel c of Q|K|V sits in an input row (Qwen3-Next's ssm_in: per key head
        /// q, k, its value heads' v, their z).
        func inputChannel(_ c: Int) -> Int {
            guard grouped else { return c }
            let group = 2 * n + 2 * r * n
            if c < 2 * keyDim { return (c % keyDim) / n * group + (c / keyDim) * n + c % n }
            let i = c - 2 * keyDim
            return i / (r * n) * group + 2 * n + i % (r * n)
        }
    }

    // rows 0..<7: sequence of each row (interleaved), the fresh one first at position 0
    private var sequenceOfRow: [Int] { [0, 1, 0, 0, 1, 0, 1] }

    func testDeltaNetKernels() throws {
        for net in [Net(kHeads: 2, vHeads: 4, n: 32, taps: 4, grouped: false, groupedValues: false),
                    Net(kHeads: 2, vHeads: 4, n: 16, taps: 3, grouped: true, groupedValues: true),
                    Net(kHeads: 1, vHeads: 2, n: 128, taps: 4, grouped: false, groupedValues: false)] {
            try checkDeltaNet(net)
        }
    }

    private func checkDeltaNet(_ d: Net) throws {
        let rows = sequenceOfRow.count, eps: Float = 1e-6, what = "DeltaNet \(d)"
        let inStride = d.grouped ? d.convDim + d.valueDim : d.convDim
        let input = random(rows * inStride), convW = random(d.convDim * d.taps, scale: 0.5)
        let z = random(rows * d.valueDim), betaIn = random(rows * 2 * d.vHeads, scale: 2), alphaIn = random(rows * d.vHeads, scale: 2)
        let dt = random(d.vHeads), a = random(d.vHeads).map { -abs($0) - 0.1 }, normW = random(d.n)
        // slots 0 and 1: slot 1 (sequence 0, fresh) full of garbage it must not read; slot 0
        // (sequence 1) a state it resumes
        let slotFloats = d.stateFloats + 8, layerOff = 8 // one layer, 8 floats of another before it
        let states = random(2 * slotFloats, scale: 0.3)
        let slotOf = [1, 0]
        var rowsOf = [[Int]](repeating: [], count: 2)
        for (t, s) in sequenceOfRow.enumerated() { rowsOf[s].append(t) }
        var seqs: [Int32] = [], rowList: [Int32] = []
        for s in 0..<2 {
            seqs += [Int32(rowList.count), Int32(rowsOf[s].count), Int32(slotOf[s]), s == 0 ? 1 : 0]
            rowList += rowsOf[s].map(Int32.init)
        }
        // the references, in float64
        var wantQKV = [Double](repeating: 0, count: rows * d.convDim), wantOut = [Double](repeating: 0, count: rows * d.valueDim)
        var wantStates = states.map(Double.init)
        for s in 0..<2 {
            let base = slotOf[s] * slotFloats + layerOff
            var conv = (0..<((d.taps - 1) * d.convDim)).map { s == 0 ? 0 : Double(states[base + $0]) }
            let recBase = base + (d.taps - 1) * d.convDim
            var m = (0..<(d.vHeads * d.n * d.n)).map { s == 0 ? 0 : Double(states[recBase + $0]) }
            for t in rowsOf[s] {
                for c in 0..<d.convDim {
                    let x = Double(input[t * inStride + d.inputChannel(c)])
                    var sum = x * Double(convW[c * d.taps + d.taps - 1])
                    for k in 0..<(d.taps - 1) { sum += conv[k * d.convDim + c] * Double(convW[c * d.taps + k]) }
                    wantQKV[t * d.convDim + c] = sum / (1 + exp(-sum))
                    for k in 0..<(d.taps - 1) { conv[k * d.convDim + c] = k + 1 < d.taps - 1 ? conv[(k + 1) * d.convDim + c] : x }
                }
                let row = Array(wantQKV[(t * d.convDim)..<((t + 1) * d.convDim)])
                func l2(_ v: ArraySlice<Double>) -> [Double] {
                    let ss = v.reduce(0) { $0 + $1 * $1 }
                    return v.map { $0 / (ss + Double(eps)).squareRoot() }
                }
                for h in 0..<d.vHeads {
                    let kh = d.keyHead(h), g = h / d.r, hi = h % d.r
                    let q = l2(row[(kh * d.n)..<((kh + 1) * d.n)]), k = l2(row[(d.keyDim + kh * d.n)..<(d.keyDim + (kh + 1) * d.n)])
                    let v = row[(2 * d.keyDim + h * d.n)..<(2 * d.keyDim + (h + 1) * d.n)].map { $0 }
                    let bRaw = d.grouped ? betaIn[t * 2 * d.vHeads + g * 2 * d.r + hi] : betaIn[t * d.vHeads + h]
                    let aRaw = d.grouped ? betaIn[t * 2 * d.vHeads + g * 2 * d.r + d.r + hi] : alphaIn[t * d.vHeads + h]
                    let beta = 1 / (1 + exp(-Double(bRaw))), u = Double(aRaw) + Double(dt[h])
                    let decay = exp((u > 20 ? u : log1p(exp(u))) * Double(a[h]))
                    var o = [Double](repeating: 0, count: d.n)
                    for j in 0..<d.n {
                        // the GPU's layout: S[i][j] at i·n + j (thread j's column)
                        func at(_ i: Int) -> Int { h * d.n * d.n + i * d.n + j }
                        var recall = 0.0
                        for i in 0..<d.n { m[at(i)] *= decay; recall += m[at(i)] * k[i] }
                        let delta = (v[j] - recall) * beta
                        for i in 0..<d.n { m[at(i)] += delta * k[i]; o[j] += m[at(i)] * q[i] }
                        o[j] /= Double(d.n).squareRoot()
                    }
                    let rms = 1 / (o.reduce(0) { $0 + $1 * $1 } / Double(d.n) + Double(eps)).squareRoot()
                    for j in 0..<d.n {
                        let zj = Double(d.grouped ? input[t * inStride + g * (2 * d.n + 2 * d.r * d.n) + 2 * d.n + d.r * d.n + hi * d.n + j]
                                                  : z[t * d.valueDim + h * d.n + j])
                        wantOut[t * d.valueDim + h * d.n + j] = o[j] * rms * Double(normW[j]) * zj / (1 + exp(-zj))
                    }
                }
            }
            for i in conv.indices { wantStates[base + i] = conv[i] }
            for i in m.indices { wantStates[recBase + i] = m[i] }
        }
        // the kernels
        let inB = try upload(input), stB = try upload(states), qkvB = try upload([Float](repeating: 0, count: rows * d.convDim))
        let seqB = try upload(seqs), rowB = try upload(rowList)
        try run(GPUKernels.deltaNetConv, [inB, try upload(convW), stB, qkvB, seqB, rowB],
                GPUParams.DeltaNetConv(convDim: UInt32(d.convDim), taps: UInt32(d.taps), inStride: UInt32(inStride), slotFloats: UInt32(slotFloats),
                                       layerOff: UInt32(layerOff), grouped: d.grouped ? 1 : 0, keyDim: UInt32(d.keyDim), hk: UInt32(d.n),
                                       hv: UInt32(d.r * d.n)).words,
                ((d.convDim + 63) / 64, 2, 1))
        assertClose(try read(qkvB, rows * d.convDim), wantQKV, tolerance: wantQKV.map { abs($0) * 1e-5 + 1e-6 }, "\(what): deltanet_conv")
        let ba = d.grouped ? betaIn : Array(betaIn.prefix(rows * d.vHeads))
        let zB = d.grouped ? inB : try upload(z), betaB = try upload(ba), alphaB = d.grouped ? betaB : try upload(alphaIn)
        let outB = try upload([Float](repeating: 0, count: rows * d.valueDim))
        try run(GPUKernels.deltaNetRecur, [qkvB, zB, betaB, alphaB, stB, seqB, rowB, outB, try upload(dt), try upload(a), try upload(normW)],
                GPUParams.DeltaNetRecur(n: UInt32(d.n), kHeads: UInt32(d.kHeads), vHeads: UInt32(d.vHeads), convDim: UInt32(d.convDim),
                                        slotFloats: UInt32(slotFloats), layerOff: UInt32(layerOff + (d.taps - 1) * d.convDim),
                                        grouped: d.grouped ? 1 : 0, groupedRates: d.grouped ? 1 : 0, groupedValues: d.groupedValues ? 1 : 0,
                                        zStride: UInt32(d.grouped ? inStride : d.valueDim), betaStride: UInt32(d.grouped ? 2 * d.vHeads : d.vHeads),
                                        alphaStride: UInt32(d.grouped ? 2 * d.vHeads : d.vHeads), eps: eps).words,
                (d.vHeads, 2, 1))
        assertClose(try read(outB, rows * d.valueDim), wantOut, tolerance: wantOut.map { abs($0) * 1e-4 + 1e-5 }, "\(what): deltanet_recur")
        assertClose(try read(stB, 2 * slotFloats), wantStates, tolerance: wantStates.map { abs($0) * 1e-4 + 1e-5 }, "\(what): states")

    }

    /// split_query's queries and sigmoid_gate's gated outputs from a [query, gate]-per-head product.
    func testGatedQueryKernels() throws {
        let (heads, hd, rows, stride) = (3, 20, 5, 70)
        let qDim = heads * hd, s = random(rows * 2 * qDim)
        let qB = try upload([Float](repeating: 7, count: rows * stride))
        try run(GPUKernels.splitQuery, [try upload(s), qB], GPUParams.GatedQuery(qDim: UInt32(qDim), headDim: UInt32(hd), rows: UInt32(rows), stride: UInt32(stride)).words,
                ((qDim + 255) / 256, rows, 1))
        let wantQ = (0..<(rows * stride)).map { i -> Double in
            let t = i / stride, c = i % stride
            return c < qDim ? Double(s[t * 2 * qDim + 2 * (c / hd) * hd + c % hd]) : 7
        }
        assertClose(try read(qB, rows * stride), wantQ, tolerance: wantQ.map { _ in 0 }, "split_query")
        let x = random(rows * stride), xB = try upload(x)
        try run(GPUKernels.sigmoidGate, [xB, try upload(s)], GPUParams.GatedQuery(qDim: UInt32(qDim), headDim: UInt32(hd), rows: UInt32(rows), stride: UInt32(stride)).words,
                ((qDim + 255) / 256, rows, 1))
        let want = (0..<(rows * stride)).map { i -> Double in
            let t = i / stride, c = i % stride
            guard c < qDim else { return Double(x[i]) }
            let g = Double(s[t * 2 * qDim + (2 * (c / hd) + 1) * hd + c % hd])
            return Double(x[i]) / (1 + exp(-g))
        }
        assertClose(try read(xB, rows * stride), want, tolerance: want.map { abs($0) * 1e-6 + 1e-7 }, "sigmoid_gate")
    }
}
