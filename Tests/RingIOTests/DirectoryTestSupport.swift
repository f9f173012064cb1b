#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIO

/// Small blocking helpers that build trees for the directory tests with
/// plain libc calls (not the code under test).
enum Tree {
    static func mkdir(_ path: String) {
        let made = Glibc.mkdir(path, 0o755)
        precondition(made == 0 || errno == EEXIST, "mkdir \(path): \(errno)")
    }

    static func touch(_ path: String, _ text: String = "") {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        precondition(fd >= 0, "create \(path): \(errno)")
        if !text.isEmpty { _ = text.withCString { write(fd, $0, strlen($0)) } }
        close(fd)
    }

    /// A file whose name is the bytes `name` (not necessarily UTF-8).
    static func touch(in directory: String, rawName name: [UInt8]) {
        let path = Array(directory.utf8) + [UInt8(ascii: "/")] + name + [0]
        let fd = path.withUnsafeBufferPointer { p in
            p.withMemoryRebound(to: CChar.self) { open($0.baseAddress!, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644) }
        }
        precondition(fd >= 0, "create raw name: \(errno)")
        close(fd)
    }

    static func symlink(_ target: String, _ path: String) {
        precondition(Glibc.symlink(target, path) == 0, "symlink \(path): \(errno)")
    }

    static func exists(_ path: String) -> Bool {
        var status = stat()
        return lstat(path, &status) == 0
    }

    /// `directories` directories of `files` files each under `root`, with
    /// names d0…, f0…; returns every path made (directories first).
    @discardableResult
    static func make(_ root: String, directories: Int, files: Int) -> Set<String> {
        var paths = Set<String>()
        for d in 0..<directories {
            let dir = root + "/d\(d)"
            mkdir(dir)
            paths.insert(dir)
            for f in 0..<files {
                touch(dir + "/f\(f)")
                paths.insert(dir + "/f\(f)")
            }
        }
        return paths
    }
}

/// The entries of a listing, as path strings to types.
func listing(_ path: String, recursive: Bool) async throws(IOError) -> [String: FileInfo.FileType] {
    var found: [String: FileInfo.FileType] = [:]
    for try await entry in IO.directoryEntries(at: FilePath(path), recursive: recursive) {
        #expect(found[entry.path.string] == nil, "listed twice: \(entry.path)")
        found[entry.path.string] = entry.type
    }
    return found
}

/// The errno of the `IOError` `body` throws; `nil` when it throws nothing
/// (or something else).
func thrownErrno(_ body: () async throws -> Void) async -> Errno? {
    do {
        try await body()
        return nil
    } catch let error as IOError {
        return error.errno
    } catch {
        return nil
    }
}
