// swift-tools-version:6.1
// RingIO's libFuzzer targets, in their own package so that the library's
// `swift build` never needs -sanitize=fuzzer. Build and run with scripts/fuzz.
import PackageDescription

let package = Package(
    name: "RingIOFuzz",
    dependencies: [
        .package(name: "RingIO", path: "../"),
    ],
    targets: [
        // Built with -sanitize=fuzzer,address -parse-as-library (scripts/fuzz).
        .executableTarget(
            name: "DataChunkFuzz",
            dependencies: [.product(name: "RingIO", package: "RingIO")]
        ),
        // The channel API against a model file (public API only).
        .executableTarget(
            name: "ChannelFuzz",
            dependencies: [.product(name: "RingIO", package: "RingIO")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
