// swift-tools-version:6.1
// RingIO's benchmarks live in their own package so that the library's users
// never build SwiftNIO or the benchmark harness.
//
//   swift run -c release --package-path Benchmarks micro        # queue hop, engine NOP, read round trip
//   swift run -c release --package-path Benchmarks throughput   # read, copy, random reads, small files, append log (scripts/bench)
//   cd Benchmarks && swift package benchmark                    # ordo-one micro benchmarks (allocations)
//   scripts/bench-thresholds [update]                            # their allocation counts against Benchmarks/Thresholds
import PackageDescription

let package = Package(
    name: "RingIOBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "RingIO", path: "../"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        .package(url: "https://github.com/ordo-one/benchmark", from: "1.38.1", traits: ["MallocInterposer"]),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
    ],
    targets: [
        .target(name: "BenchSupport", path: "Sources/BenchSupport"),
        .executableTarget(
            name: "micro",
            dependencies: [
                "BenchSupport",
                .product(name: "RingIO", package: "RingIO"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Sources/micro"
        ),
        .executableTarget(
            name: "throughput",
            dependencies: [
                "BenchSupport",
                .product(name: "RingIO", package: "RingIO"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "_NIOFileSystem", package: "swift-nio"),
            ],
            path: "Sources/throughput"
        ),
        .executableTarget(
            name: "RingIOMicro",
            dependencies: [
                .product(name: "RingIO", package: "RingIO"),
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Benchmarks/RingIOMicro",
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
