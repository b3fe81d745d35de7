@testable import VeloCore

/// The machine's GPU for the tests that run kernels (Vulkan: lavapipe in CI, VK_DRIVER_FILES
/// picks it; Metal on macOS), opened once for them all. No device is an error, not a skip.
enum TestGPU {
    nonisolated(unsafe) private static var shared: GPUDevice?

    static func device() throws -> GPUDevice {
        if let d = shared { return d }
        #if canImport(Metal)
        let opened = try openGPUDevice(.metal, index: nil)
        #else
        let opened = try openGPUDevice(.vulkan, index: nil)
        #endif
        guard let d = opened else { throw VeloError(.unsupported, "no GPU device for the kernel tests") }
        shared = d
        return d
    }
}
