import XCTest
@testable import VeloCore

/// Gemma 4's kernels (per_layer_inputs, per_layer_gate, scale) against float64 references
/// written from CPUForward.perLayerInputs / perLayerEmbedding / scale (llama.cpp's gemma4 graph).
extension GPUKernelTests {
    func testPerLayerInputs() throws {
        // widths past one workgroup's 128 threads and below it, several layers and tokens
        for (width, layers, tokens) in [(16, 3, 2), (300, 2, 3)] {
            let all = layers * width, eps: Float = 1e-6, projScale = 1 / Float(40).squareRoot(), mix = 1 / Float(2).squareRoot()
            let p = random(tokens * all).map { $0 * 4 }, t = random(tokens * all), g = random(width)
            let pB = try upload(p)
            try run(GPUKernels.perLayerInputs, [pB, try upload(t), try upload(g)],
                    GPUParams.PerLayerInputs(width: UInt32(width), layers: UInt32(layers), eps: eps, projScale: projScale, mix: mix).words, (layers, tokens, 1))
            var want = [Double](repeating: 0, count: tokens * all)
            for r in 0..<(tokens * layers) {
                let v = (0..<width).map { Double(p[r * width + $0]) * Double(projScale) }
                let rms = 1 / (v.reduce(0) { $0 + $1 * $1 } / Double(width) + Double(eps)).squareRoot()
                for j in 0..<width { want[r * width + j] = (v[j] * rms * Double(g[j]) + Double(t[r * width + j])) * Double(mix) }
            }
            assertClose(try read(pB, tokens * all), want, tolerance: want.map { abs($0) * 1e-5 + 1e-6 }, "per_layer_inputs \(width)")
        }
    }

    func testPerLayerGateAndScale() throws {
        let (width, layers, rows, layer) = (20, 3, 4, 2)
        let g = random(rows * width).map { $0 * 3 }, inputs = random(rows * layers * width)
        let gB = try upload(g)
        try run(GPUKernels.perLayerGate, [gB, try upload(inputs)],
                GPUParams.PerLayerGate(width: UInt32(width), rows: UInt32(rows), iStride: UInt32(layers * width), iOff: UInt32(layer * width)).words,
                ((width + 255) / 256, rows, 1))
        let want = (0..<(rows * width)).map { i -> Double in
            let x = Double(g[i]), u = Double(inputs[(i / width) * layers * width + layer * width + i % width])
            return 0.5 * x * (1 + tanh(0.7978845608028654 * x * (1 + 0.044715 * x * x))) * u
        }
        assertClose(try read(gB, rows * width), want, tolerance: want.map { abs($0) * 1e-5 + 1e-6 }, "per_layer_gate")
        let x = random(1000), xB = try upload(x)
        try run(GPUKernels.scale, [xB], GPUParams.Scale(count: 999, s: 0.375).words, (4, 1, 1))
        let scaled = x.indices.map { Double(x[$0]) * ($0 < 999 ? 0.375 : 1) }
        assertClose(try read(xB, 1000), scaled, tolerance: scaled.map { abs($0) * 1e-7 }, "scale")
    }
}
