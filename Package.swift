// swift-tools-version:5.9
import PackageDescription

// libVelo (.so / .dylib): the engine, exposed to Bun through a C ABI (swift/Sources/VeloCore/CAPI).
// Build through the Makefile: it passes -static-stdlib and the export list on Linux.
let package = Package(
    name: "Velo",
    products: [
        .library(name: "Velo", type: .dynamic, targets: ["VeloCore"]),
    ],
    targets: [
        // Hot loops in C: SIMD paths chosen at run time with per-function target attributes.
        .target(
            name: "CKernels",
            path: "swift/Sources/CKernels",
            cSettings: [.unsafeFlags(["-O3"])]
        ),
        // Thread pool and clocks (C: atomics and pthreads without Foundation).
        .target(
            name: "CRuntime",
            path: "swift/Sources/CRuntime",
            cSettings: [.unsafeFlags(["-O2"])]
        ),
        .target(
            name: "VeloCore",
            dependencies: ["CKernels", "CRuntime"],
            path: "swift/Sources/VeloCore"
        ),
        .testTarget(
            name: "VeloCoreTests",
            dependencies: ["VeloCore", "CKernels"],
            path: "swift/Tests/VeloCoreTests"
        ),
    ]
)
