// throughput files: the SwiftNIO rows (_NIOFileSystem's FileSystem.shared).
import NIOCore
import _NIOFileSystem

enum NIOFiles {
    static func countList(_ tree: String) throws -> Int {
        try blocking("NIO listContents", timeout: 120) {
            try await FileSystem.shared.withDirectoryHandle(atPath: FilePath(tree)) { directory in
                var n = 0
                for try await batch in directory.listContents(recursive: true).batched() {
                    for entry in batch where entry.type == .regular { n += 1 }
                }
                return n
            }
        }
    }

    static func info(_ paths: [String]) throws -> Int {
        try blocking("NIO info", timeout: 120) {
            var n = 0
            for path in paths where try await FileSystem.shared.info(forFileAt: FilePath(path))?.type == .regular {
                n += 1
            }
            return n
        }
    }

    static func copy(_ source: String, _ destination: String) throws -> Int {
        try blocking("NIO copyItem", timeout: 300) {
            try await FileSystem.shared.copyItem(at: FilePath(source), to: FilePath(destination))
        }
        return try FilesBench.countCopied(destination, expected: 10_000)
    }

    /// Lists `root` recursively and reads each regular file whole, `width`
    /// files at a time.
    static func readTree(_ root: String, width: Int) throws -> Int {
        try blocking("NIO read tree", timeout: 300) {
            try await FileSystem.shared.withDirectoryHandle(atPath: FilePath(root)) { directory in
                try await withThrowingTaskGroup(of: Int.self) { group in
                    var sum = 0, running = 0
                    for try await batch in directory.listContents(recursive: true).batched() {
                        for entry in batch where entry.type == .regular {
                            if width == 1 {
                                sum &+= try await readOne(entry.path)
                                continue
                            }
                            if running == width, let one = try await group.next() {
                                sum &+= one
                                running -= 1
                            }
                            let path = entry.path
                            group.addTask { try await readOne(path) }
                            running += 1
                        }
                    }
                    while let one = try await group.next() { sum &+= one }
                    return sum
                }
            }
        }
    }

    static func readOne(_ path: FilePath) async throws -> Int {
        try await FileSystem.shared.withFileHandle(forReadingAt: path) { file in
            let buffer = try await file.readToEnd(maximumSizeAllowed: .mebibytes(1))
            return buffer.withUnsafeReadableBytes { FilesBench.fileSum($0) }
        }
    }

    static func remove(_ path: String) throws -> Int {
        let removed = try blocking("NIO removeItem", timeout: 300) {
            try await FileSystem.shared.removeItem(at: FilePath(path), recursively: true)
        }
        guard removed == 10_101 else { throw BenchError("NIO removed \(removed) items, not 10,101") }
        return FilesBench.exists(path) ? 0 : 1
    }
}
