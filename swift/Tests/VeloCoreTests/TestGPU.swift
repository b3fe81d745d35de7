import Foundation
import XCTest
@testable import VeloCore

/// The machine's GPU for the tests that run kernels (Vulkan: lavapipe in CI, VK_DRIVER_FILES
/// picks it; Metal on macOS), opened once for them all. No device is an error, not a skip; only
/// `VELO_TEST_GPU=off` (the macOS workflow's CPU step, whose machine has no usable GPU) skips
/// them, each with that reason, and XCTest counts them as skipped.
enum TestGPU {
    nonisolated(unsafe) private static var shared: GPUDevice?

    #if canImport(Metal)
    static let backend = BackendChoice.metal
    #else
    static let backend = BackendChoice.vulkan
    #endif

    /// Throws XCTSkip where this run was told to leave the GPU alone.
    static func require() throws {
        if ProcessInfo.processInfo.environment["VELO_TEST_GPU"] == "off" {
            throw XCTSkip("VELO_TEST_GPU=off: this run tests no GPU kernel")
        }
    }

    static func device() throws -> GPUDevice {
        if let d = shared { return d }
        try require()
        let opened = try openGPUDevice(backend, index: nil)
        guard let d = opened else { throw VeloError(.unsupported, "no GPU device for the kernel tests") }
        shared = d
        return d
    }
}
