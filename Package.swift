// swift-tools-version:6.1
import PackageDescription

let package = Package(
    name: "RingIO",
    products: [
        .library(name: "RingIO", targets: ["RingIO"]),
        .library(name: "RingIOFoundation", targets: ["RingIOFoundation"]),
        .executable(name: "ringio-demo", targets: ["ringio-demo"]),
        .executable(name: "ringcp", targets: ["ringcp"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        // Documentation only: `swift package generate-documentation --target RingIO`.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CLiburing",
            pkgConfig: "liburing",
            providers: [.apt(["liburing-dev"])]
        ),
        .target(
            name: "RingIO",
            dependencies: [
                "CLiburing",
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .target(
            name: "RingIOFoundation",
            dependencies: ["RingIO"]
        ),
        .executableTarget(
            name: "ringio-demo",
            dependencies: [
                "RingIO",
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        .executableTarget(
            name: "ringcp",
            dependencies: [
                "RingIO",
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .testTarget(
            name: "RingcpTests",
            dependencies: ["ringcp"]
        ),
        // Test-only C helpers (a seccomp filter that refuses io_uring, the heap in use).
        .target(
            name: "CRingIOTestSupport",
            path: "Tests/CRingIOTestSupport"
        ),
        .testTarget(
            name: "RingIOTests",
            dependencies: [
                "RingIO",
                "RingIOFoundation",
                "CRingIOTestSupport",
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
