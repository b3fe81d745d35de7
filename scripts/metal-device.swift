// metal-device.swift — what scripts/ci-macos.sh asks Metal itself (built there with
// `xcrun swiftc -target <arch>-apple-macos14`, the package's minimum).
//   metal-device             prints the default device; exit status 0 for a real GPU, 3 for a
//                            virtual one, 4 for none
//   metal-device METALLIB    also makes a compute pipeline of every function in METALLIB (constant
//                            0, the thread count, at 64) and prints its thread limit and threadgroup
//                            memory against the device's; exit status 1 if one fails or is over
//
// GitHub's hosted macOS runners are virtual machines whose GPU is Apple's paravirtual device
// (MTLDevice.name "Apple Paravirtual device"): others have seen its compute kernels return zeros
// and it report no GPU family above Apple5 (JuliaGPU/Metal.jl#309), while the kernels' simdgroup
// reductions need Apple7 or Mac2; so the workflow runs no Metal tests on it.
import Foundation
import Metal

guard let device = MTLCreateSystemDefaultDevice() else {
    print("metal: no Metal device")
    exit(4)
}
let virtual = device.name.localizedCaseInsensitiveContains("paravirtual")
let families = [("apple7", MTLGPUFamily.apple7), ("apple8", .apple8), ("mac2", .mac2)]
    .filter { device.supportsFamily($0.1) }.map(\.0)
print("metal: \(device.name)\(virtual ? " (a virtual GPU)" : ""); families: \(families.isEmpty ? "none of apple7, apple8, mac2" : families.joined(separator: " ")); "
    + "max threadgroup memory \(device.maxThreadgroupMemoryLength) bytes, max buffer \(device.maxBufferLength >> 20) MiB")

var failures = 0
if CommandLine.arguments.count > 1 {
    let path = CommandLine.arguments[1]
    do {
        let library = try device.makeLibrary(URL: URL(fileURLWithPath: path))
        let names = library.functionNames.sorted()
        print("metal: \(path): \(names.count) functions")
        for name in names {
            do {
                let values = MTLFunctionConstantValues()
                var threads: UInt32 = 64
                values.setConstantValue(&threads, type: .uint, index: 0)
                let state = try device.makeComputePipelineState(function: try library.makeFunction(name: name, constantValues: values))
                let over = state.staticThreadgroupMemoryLength > device.maxThreadgroupMemoryLength
                if over { failures += 1 }
                print("  \(name): up to \(state.maxTotalThreadsPerThreadgroup) threads, \(state.staticThreadgroupMemoryLength) bytes of threadgroup memory\(over ? " (OVER the device's limit)" : "")")
            } catch {
                failures += 1
                print("  \(name): FAILED: \(error)")
            }
        }
    } catch {
        failures += 1
        print("metal: cannot load \(path): \(error)")
    }
}
exit(failures > 0 ? 1 : virtual ? 3 : 0)
