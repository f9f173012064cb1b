#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
import RingIOChannel
@_spi(Engine) import RingIOEngine

extension IO {
    /// Files copied at once by `copyItem` of a tree: 8 (each an
    /// `IO.copyFile`, whose small-file path is one pool worker's run and
    /// whose large-file path holds at most its own buffers in flight).
    static let treeCopyWidth = 8

    /// Copies the file, symlink or directory tree at `source` to
    /// `destination`.
    ///
    /// A regular file is copied with ``copyFile(from:to:options:engine:)``
    /// and `options`; a symlink is created anew with the same target (never
    /// followed); a directory is created with the source's permissions and
    /// its tree copied: entries listed by ``directoryEntries(at:recursive:)``
    /// (never more than 32 directories open), up to eight files copied at
    /// once. A directory already at a directory's destination is used,
    /// unless `options.exclusive`. A symlink the copy creates is never
    /// written through: each path is created once.
    ///
    /// ```swift
    /// try await IO.copyItem(from: "Sources", to: "/tmp/Sources-copy")
    /// ```
    ///
    /// - Parameters:
    ///   - source: what to copy.
    ///   - destination: its copy's path.
    ///   - options: how each file is copied (`exclusive`: fail with
    ///     `EEXIST` where anything exists at a destination path).
    /// - Throws: an ``IOError`` naming the entry that failed; the copy stops
    ///   there (what was copied stays).
    public static func copyItem(from source: FilePath, to destination: FilePath,
                                options: CopyOptions = .init()) async throws(IOError) {
        let info: FileInfo
        do throws(IOError) {
            info = try await IO.info(at: source, followingSymlinks: false)
        } catch {
            var error = error
            error.side = .source
            throw error
        }
        switch info.type {
        case .directory:
            try await copyTree(from: source, to: destination, permissions: info.permissions, options: options)
        case .symlink:
            try await copyLink(from: source, to: destination, options: options)
        default:
            _ = try await copyFile(from: source, to: destination, options: options)
        }
    }

    /// A symlink: the same target at `destination`.
    private static func copyLink(from source: FilePath, to destination: FilePath,
                                 options: CopyOptions) async throws(IOError) {
        let target = try await destinationOfSymbolicLink(at: source)
        do throws(IOError) {
            try await createSymbolicLink(at: destination, withDestination: target)
        } catch .fileExists where !options.exclusive {
            try await removeItem(at: destination)
            try await createSymbolicLink(at: destination, withDestination: target)
        }
    }

    /// A directory `destination` with `permissions` (an existing one is
    /// used, unless `exclusive`).
    private static func makeDirectory(_ destination: FilePath, permissions: FilePermissions,
                                      exclusive: Bool) async throws(IOError) {
        do throws(IOError) {
            try await createDirectory(at: destination, permissions: permissions)
        } catch .fileExists where !exclusive {
            let existing = try await info(at: destination, followingSymlinks: false)
            guard existing.type == .directory else { throw IOError(.create, path: destination, errno: .fileExists) }
        }
    }

    /// A directory and everything under it.
    private static func copyTree(from source: FilePath, to destination: FilePath, permissions: FilePermissions,
                                 options: CopyOptions) async throws(IOError) {
        try await makeDirectory(destination, permissions: permissions, exclusive: options.exclusive)
        let result = await withTaskGroup(of: IOError?.self, returning: IOError?.self) { group in
            var running = 0
            var failure: IOError?
            do throws(IOError) {
                for try await entry in directoryEntries(at: source, recursive: true) {
                    var relative = entry.path
                    _ = relative.removePrefix(source)
                    var target = destination
                    target.append(relative.components)
                    if entry.type == .directory {
                        // Before its entries: the walk lists a directory in
                        // its parent's batch, before it opens it.
                        let mode = try await info(at: entry.path, followingSymlinks: false).permissions
                        try await makeDirectory(target, permissions: mode, exclusive: options.exclusive)
                        continue
                    }
                    if running == treeCopyWidth, let done = await group.next() {
                        running -= 1
                        if let done { throw done }
                    }
                    running += 1
                    let from = entry.path
                    group.addTask {
                        do throws(IOError) {
                            if entry.type == .symlink {
                                try await copyLink(from: from, to: target, options: options)
                            } else {
                                _ = try await copyFile(from: from, to: target, options: options)
                            }
                            return nil
                        } catch {
                            return error
                        }
                    }
                }
            } catch {
                failure = error
            }
            while let done = await group.next() {
                if failure == nil, let done { failure = done }
            }
            return failure
        }
        if let result { throw result }
    }
}
