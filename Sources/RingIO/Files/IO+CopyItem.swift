#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import RingIOBase
import RingIOChannel
import RingIOCopy
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
    /// and `options` (the copy engine: its plan chooses how the bytes
    /// move); a symlink is created anew with the same target (never
    /// followed); a directory is created with the source's permissions and
    /// its tree copied: entries listed by ``directoryEntries(at:recursive:)``
    /// (never more than 32 directories open), up to eight files copied at
    /// once. A directory already at a directory's destination is used,
    /// unless `options.exclusive`. A symlink the copy creates is never
    /// written through: each path is created once.
    ///
    /// `options.preserve` applies to every entry: a file's attributes are
    /// set on it before it is closed (and renamed into place), a symlink's
    /// own owner and times after it is made, and a directory's once all
    /// its entries are copied (its times would change otherwise). A
    /// directory is created writable by its owner, whatever the source's
    /// permissions, and given them at the end, so that a read-only
    /// directory's entries can be copied into it.
    ///
    /// ```swift
    /// var options = IO.CopyOptions()
    /// options.preserve = [.permissions, .times]
    /// try await IO.copyItem(from: "Sources", to: "/tmp/Sources-copy", options: options)
    /// ```
    ///
    /// - Parameters:
    ///   - source: what to copy.
    ///   - destination: its copy's path.
    ///   - options: how each file is copied (`exclusive`: fail with
    ///     `EEXIST` where anything exists at a destination path;
    ///     `preserve`: the metadata every entry takes).
    /// - Throws: an ``IOError`` naming the entry that failed and its side;
    ///   the copy stops there (what was copied stays; a file that failed
    ///   leaves nothing under its name).
    public static func copyItem(from source: FilePath, to destination: FilePath,
                                options: CopyOptions = .init()) async throws(IOError) {
        let info = try await sourceInfo(source)
        switch info.type {
        case .directory:
            try await copyTree(from: source, to: destination, info: info, options: options)
        case .symlink:
            try await copyLink(from: source, to: destination, info: info, options: options)
        default:
            _ = try await copyFile(from: source, to: destination, options: options)
        }
    }

    /// The source entry's own info (a symlink not followed), its errors on the source side.
    private static func sourceInfo(_ path: FilePath) async throws(IOError) -> FileInfo {
        do throws(IOError) {
            return try await IO.info(at: path, followingSymlinks: false)
        } catch {
            var error = error
            error.side = .source
            throw error
        }
    }

    /// A symlink: the same target at `destination` (`info`: the source
    /// link's own, for `preserve`; nil: looked up if needed).
    private static func copyLink(from source: FilePath, to destination: FilePath, info: FileInfo?,
                                 options: CopyOptions) async throws(IOError) {
        let target = try await destinationOfSymbolicLink(at: source)
        do throws(IOError) {
            try await createSymbolicLink(at: destination, withDestination: target)
        } catch .fileExists where !options.exclusive {
            try await removeItem(at: destination)
            try await createSymbolicLink(at: destination, withDestination: target)
        }
        let preserve = options.preserve.subtracting(.permissions)  // Linux keeps no permissions on a symlink
        if !preserve.isEmpty {
            let found: FileInfo
            if let info { found = info } else { found = try await sourceInfo(source) }
            try await setAttributes(preserve, of: found, at: destination, followingSymlinks: false)
        }
    }

    /// `preserve` of `info` onto the entry at `path`, on a pool worker.
    private static func setAttributes(_ preserve: CopyOptions.Preserved, of info: FileInfo, at path: FilePath,
                                      followingSymlinks: Bool) async throws(IOError) {
        try await blocking { () -> Result<Void, IOError> in
            Result { () throws(IOError) in
                do throws(Errno) {
                    try AttributeCopy.apply(preserve, owner: (info.ownerID, info.groupID), permissions: info.permissions,
                                            times: (info.accessTime.cTimespec, info.modificationTime.cTimespec),
                                            to: path, followingSymlinks: followingSymlinks)
                } catch {
                    throw IOError(.setAttributes, path: path, side: .destination, errno: error)
                }
            }
        }.get()
    }

    /// A directory `destination`, writable by its owner until `finishDirectory`
    /// (an existing one is used, unless `exclusive`).
    /// - Returns: whether it was created.
    private static func makeDirectory(_ destination: FilePath, permissions: FilePermissions,
                                      exclusive: Bool) async throws(IOError) -> Bool {
        do throws(IOError) {
            try await createDirectory(at: destination, permissions: permissions.union(.ownerReadWriteExecute))
            return true
        } catch .fileExists where !exclusive {
            let existing: FileInfo
            do throws(IOError) { existing = try await info(at: destination, followingSymlinks: false) } catch {
                var error = error
                error.side = .destination
                throw error
            }
            guard existing.type == .directory else {
                throw IOError(.create, path: destination, side: .destination, errno: .fileExists)
            }
            return false
        } catch {
            var error = error
            error.side = .destination
            throw error
        }
    }

    /// A directory whose entries are all copied: the source's permissions
    /// (where the copy made it, or `preserve` asks), then `preserve`'s owner and times.
    private static func finishDirectory(_ directory: TreeDirectory, options: CopyOptions) async throws(IOError) {
        var preserve = options.preserve
        // Made writable by its owner for its entries: its own bits back.
        if directory.created && !directory.info.permissions.contains(.ownerReadWriteExecute) { preserve.insert(.permissions) }
        if preserve.isEmpty { return }
        try await setAttributes(preserve, of: directory.info, at: directory.path, followingSymlinks: true)
    }

    /// A directory of the copy, finished once its entries are in.
    private struct TreeDirectory: Sendable {
        let path: FilePath
        let info: FileInfo
        let created: Bool
    }

    /// A directory and everything under it.
    private static func copyTree(from source: FilePath, to destination: FilePath, info: FileInfo,
                                 options: CopyOptions) async throws(IOError) {
        let created = try await makeDirectory(destination, permissions: info.permissions, exclusive: options.exclusive)
        // Finished deepest first, once every entry is copied (one record a
        // directory: the walk lists each before its entries).
        var directories = [TreeDirectory(path: destination, info: info, created: created)]
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
                        let found = try await sourceInfo(entry.path)
                        let made = try await makeDirectory(target, permissions: found.permissions, exclusive: options.exclusive)
                        directories.append(TreeDirectory(path: target, info: found, created: made))
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
                                try await copyLink(from: from, to: target, info: nil, options: options)
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
                // The walk's own errors (a directory that cannot be listed) are the source's.
                var error = error
                if error.side == nil { error.side = .source }
                failure = error
            }
            while let done = await group.next() {
                if failure == nil, let done { failure = done }
            }
            return failure
        }
        if let result {
            // What was made stays, but no directory is left writable that should not be.
            for directory in directories.reversed() where directory.created {
                try? await finishDirectory(directory, options: CopyOptions())
            }
            throw result
        }
        for directory in directories.reversed() { try await finishDirectory(directory, options: options) }
    }
}
