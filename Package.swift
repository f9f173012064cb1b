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
        // The library's layers, one target each, lowest first. A target sees
        // only the layers below it, so an upward arrow (engine code naming a
        // channel type, say) is a build error. What an upper layer needs from
        // a lower one is `package`; `RingIO` re-exports the public API of
        // every layer, so users write `import RingIO` only.
        // See docs/Architecture.md, "Layers".
        .target(
            // Locks, condition lock, ring buffer, threads, idle spin; the
            // system calls (`Syscall`, over swift-system where it has them).
            name: "RingIOBase",
            dependencies: [
                "CLiburing",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Sources/RingIO/Base"
        ),
        .target(
            // IOQueue, IOGroup, the worker pool, the executors.
            name: "RingIOQueue",
            dependencies: ["RingIOBase", .product(name: "SystemPackage", package: "swift-system")],
            path: "Sources/RingIO/Queue"
        ),
        .target(
            // DataChunk (a `.custom` deallocator runs on an IOQueue).
            name: "RingIOData",
            dependencies: ["RingIOBase", "RingIOQueue"],
            path: "Sources/RingIO/Data"
        ),
        .target(
            // IOEngine, IORequest, the io_uring and thread-pool backends, the
            // registered tables, the buffer pool, the fault injector.
            name: "RingIOEngine",
            dependencies: [
                "RingIOBase",
                "RingIOQueue",
                "RingIOData",
                "CLiburing",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Sources/RingIO/Engine"
        ),
        .target(
            // IOChannel: fd entries and their schedulers (Entry/), operations
            // and their progress (Operation/), the public channel API (API/).
            name: "RingIOChannel",
            dependencies: [
                "RingIOBase",
                "RingIOQueue",
                "RingIOData",
                "RingIOEngine",
                "CLiburing",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Sources/RingIO/Channel"
        ),
        .target(
            // IOSource and its kinds (timer, read, write, file system,
            // signal, process, user data) on the engine's timers and watches.
            name: "RingIOSources",
            dependencies: [
                "RingIOBase",
                "RingIOQueue",
                "RingIOData",
                "RingIOEngine",
                "RingIOChannel",
                "CLiburing",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Sources/RingIO/Sources"
        ),
        .target(
            // The copy engine: CopyPlan (the steps to try, a pure value), the
            // loop that tries them (FileCopier), every strategy (the small
            // file's plain calls, FICLONE, ext4's fallocate + splice,
            // copy_file_range, ring splices, channels, streams), one atomic
            // replace (AtomicReplace), IO.copyFile and CopyOptions.
            name: "RingIOCopy",
            dependencies: [
                "RingIOBase",
                "RingIOQueue",
                "RingIOData",
                "RingIOEngine",
                "RingIOChannel",
                "CLiburing",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Sources/RingIO/Copy"
        ),
        .target(
            // IO's one-shots (readFile, writeFile), directories, info,
            // trees (copyItem on the copy engine, removeItem), lines.
            name: "RingIOFiles",
            dependencies: [
                "RingIOBase",
                "RingIOQueue",
                "RingIOData",
                "RingIOEngine",
                "RingIOChannel",
                "RingIOCopy",
                "CLiburing",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            path: "Sources/RingIO/Files"
        ),
        .target(
            // The library users import: re-exports every layer (Exports.swift);
            // the DocC catalog RingIO.docc.
            name: "RingIO",
            dependencies: [
                "RingIOBase",
                "RingIOQueue",
                "RingIOData",
                "RingIOEngine",
                "RingIOChannel",
                "RingIOSources",
                "RingIOCopy",
                "RingIOFiles",
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            exclude: ["Base", "Queue", "Data", "Engine", "Channel", "Sources", "Copy", "Files"]
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
            ],
            // A release ringcp carries the Swift runtime and libraries in its
            // binary: loading and relocating them as shared libraries took
            // about 3 ms of every run, longer than cp's whole run (see
            // Benchmarks/results/copies-and-ringcp.md, "ringcp start-up").
            // Linked by lld, from the toolchain (gold warns about the glibc
            // functions the static FoundationEssentials uses). Debug builds
            // (the tests) link them as shared libraries. Only this executable
            // has these flags: a package that depends on the RingIO library is
            // not affected.
            linkerSettings: [
                .unsafeFlags(["-static-stdlib", "-use-ld=lld"], .when(platforms: [.linux], configuration: .release)),
                // FoundationEssentials (which ArgumentParser imports) needs these when linked statically.
                .linkedLibrary("_FoundationCShims", .when(platforms: [.linux], configuration: .release)),
                .linkedLibrary("_FoundationCollections", .when(platforms: [.linux], configuration: .release)),
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
        // What both test targets share (a latch, waits, seeded bytes).
        .target(
            name: "RingIOTestSupport",
            dependencies: ["RingIOBase", "RingIOQueue"],
            path: "Tests/RingIOTestSupport"
        ),
        // Kernel-free: state machines, plans, DataChunk, queues. No ring, no
        // file: these run in seconds and under any sandbox.
        .testTarget(
            name: "RingIOUnitTests",
            dependencies: [
                "RingIO",
                "RingIOBase",
                "RingIOQueue",
                "RingIOData",
                "RingIOEngine",
                "RingIOChannel",
                "RingIOSources",
                "RingIOCopy",
                "RingIOFiles",
                "RingIOTestSupport",
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
        // Integration: real files, pipes, sockets and processes, on both backends.
        .testTarget(
            name: "RingIOTests",
            dependencies: [
                "RingIO",
                "RingIOBase",
                "RingIOQueue",
                "RingIOData",
                "RingIOEngine",
                "RingIOChannel",
                "RingIOSources",
                "RingIOCopy",
                "RingIOFiles",
                "RingIOFoundation",
                "RingIOTestSupport",
                "CRingIOTestSupport",
                .product(name: "SystemPackage", package: "swift-system"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
