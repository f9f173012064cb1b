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


/// One `copyItem`: its options and the caller's handlers (nil: copy every
/// entry, stop at the first error).
struct TreeCopy: Sendable {
    struct Handlers: Sendable {
        let onEntry: @Sendable (IO.CopyItemEntry) async -> IO.CopyItemAction
        let onError: @Sendable (IOError) async -> IO.CopyItemErrorAction
    }

    /// A directory's device and inode.
    struct Identity: Hashable {
        let device: UInt64
        let inode: UInt64
        init(_ info: FileInfo) {
            device = info.device
            inode = info.inode
        }
    }

    /// A directory of the copy, finished once its entries are in.
    struct TreeDirectory: Sendable {
        let path: FilePath
        let info: FileInfo
        let created: Bool
    }

    /// An entry of a tree that is not a directory, to copy.
    struct FileJob: Sendable {
        let source: FilePath
        let destination: FilePath
        /// What it is (for a followed symlink, what it names).
        let type: FileInfo.FileType
        /// Its info, where the walk looked it up (a followed symlink's).
        let info: FileInfo?
    }

    /// The most entries one task copies (32 files of 4 KiB: about 0.2 ms).
    static let largestBatch = 32
    /// The batches (tasks) running at once for each core, at most.
    static let batchesPerCore = 4
    /// The batches writing into one directory at once for each core, at
    /// most: one running on each pool worker and one waiting behind it.
    static let batchesPerCoreInOneDirectory = 2

    let options: IO.CopyOptions
    let handlers: Handlers?

    /// Entries of one directory that are not directories, in order: each
    /// asked about (`onEntry`); the regular files answered `.copy` then
    /// copied together (`SmallFileBatch`: by their names in the two
    /// directories, on one pool worker), a larger one by `copyFile`; the
    /// others one at a time.
    func copyFiles(_ jobs: [FileJob]) async throws(IOError) {
        var regular: [FileJob] = []
        for job in jobs {
            guard await action(IO.CopyItemEntry(source: job.source, destination: job.destination, type: job.type,
                                                isTop: false)) == .copy else { continue }
            if job.type == .regular, job.source.lastComponent != nil {
                regular.append(job)
                continue
            }
            do throws(IOError) { try await copyOne(job.source, to: job.destination, type: job.type, info: job.info) } catch {
                try await failed(error)
            }
        }
        guard let first = regular.first else { return }
        if regular.count == 1 {
            do throws(IOError) { try await copyOne(first.source, to: first.destination, type: .regular, info: nil) } catch {
                try await failed(error)
            }
            return
        }
        func parent(_ path: FilePath) -> FilePath {
            let parent = path.removingLastComponent()
            return parent.isEmpty ? "." : parent
        }
        let items = regular.map { job in
            SmallFileBatch.Item(name: job.source.lastComponent!, source: job.source, destination: job.destination)
        }
        let results = await SmallFileBatch.copy(items, from: parent(first.source), to: parent(first.destination),
                                                settings: SmallFileBatch.Settings(options))
        for (job, result) in zip(regular, results) {
            switch result {
            case .copied:
                break
            case .failed(let error):
                try await failed(error)
            case .general:
                do throws(IOError) { try await copyOne(job.source, to: job.destination, type: .regular, info: nil) } catch {
                    try await failed(error)
                }
            }
        }
    }

    func copyItem(from source: FilePath, to destination: FilePath) async throws(IOError) {
        let info: FileInfo
        do throws(IOError) {
            info = try await sourceInfo(source, following: options.followSymlinks != .never)
        } catch {
            return try await failed(error)
        }
        try await copyEntry(source, to: destination, info: info, isTop: true, ancestors: [])
    }

    /// A failure: thrown, unless `onError` says to go on.
    func failed(_ error: IOError) async throws(IOError) {
        guard let handlers, error.errno != .canceled else { throw error }
        if await handlers.onError(error) == .stop { throw error }
    }

    func action(_ entry: IO.CopyItemEntry) async -> IO.CopyItemAction {
        guard let handlers else { return .copy }
        return await handlers.onEntry(entry)
    }

    /// An entry that is not below a directory being walked here: the top
    /// item, or a directory reached through a followed symlink.
    /// - Parameter ancestors: the directories above it (a symlink to one of them is a loop).
    func copyEntry(_ source: FilePath, to destination: FilePath, info: FileInfo, isTop: Bool,
                   ancestors: [Identity]) async throws(IOError) {
        let action = await action(IO.CopyItemEntry(source: source, destination: destination, type: info.type,
                                                    isTop: isTop))
        if action == .skip { return }
        if info.type == .directory {
            return try await copyTree(from: source, to: destination, info: info, make: action == .copy,
                                      ancestors: ancestors)
        }
        guard action == .copy else { return }
        do throws(IOError) {
            try await copyOne(source, to: destination, type: info.type, info: info)
        } catch {
            try await failed(error)
        }
    }

    /// A file or a symlink (`info`: the symlink's own, if known).
    func copyOne(_ source: FilePath, to destination: FilePath, type: FileInfo.FileType,
                 info: FileInfo?) async throws(IOError) {
        if type == .symlink {
            try await copyLink(from: source, to: destination, info: info)
        } else {
            // The type the walk (or the stat) just found: a regular file is opened with no stat first.
            _ = try await IO.copyFile(from: source, to: destination, options: options, regularSource: type == .regular)
        }
    }

    /// The source entry's info (a symlink followed or not), its errors on the source side.
    func sourceInfo(_ path: FilePath, following: Bool = false) async throws(IOError) -> FileInfo {
        do throws(IOError) {
            return try await IO.info(at: path, followingSymlinks: following)
        } catch {
            var error = error
            error.side = .source
            throw error
        }
    }

    /// A symlink: the same target at `destination` (`info`: the source
    /// link's own, for `preserve`; nil: looked up if needed).
    func copyLink(from source: FilePath, to destination: FilePath, info: FileInfo?) async throws(IOError) {
        let target = try await IO.destinationOfSymbolicLink(at: source)
        do throws(IOError) {
            try await IO.createSymbolicLink(at: destination, withDestination: target)
        } catch .fileExists where !options.exclusive {
            try await IO.removeItem(at: destination)
            try await IO.createSymbolicLink(at: destination, withDestination: target)
        }
        let preserve = options.preserve.subtracting(.permissions)  // Linux keeps no permissions on a symlink
        if !preserve.isEmpty {
            let found: FileInfo
            if let info { found = info } else { found = try await sourceInfo(source) }
            try await setAttributes(preserve, of: found, at: destination, followingSymlinks: false)
        }
    }

    /// `preserve` of `info` onto the entry at `path`, on a pool worker.
    func setAttributes(_ preserve: IO.CopyOptions.Preserved, of info: FileInfo, at path: FilePath,
                       followingSymlinks: Bool) async throws(IOError) {
        try await IO.blocking { () -> Result<Void, IOError> in
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
    func makeDirectory(_ destination: FilePath, permissions: FilePermissions) async throws(IOError) -> Bool {
        do throws(IOError) {
            try await IO.createDirectory(at: destination, permissions: permissions.union(.ownerReadWriteExecute))
            return true
        } catch .fileExists where !options.exclusive {
            let existing: FileInfo
            do throws(IOError) { existing = try await IO.info(at: destination, followingSymlinks: false) } catch {
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
    func finishDirectory(_ directory: TreeDirectory, preserving: IO.CopyOptions.Preserved) async throws(IOError) {
        var preserve = preserving
        // Made writable by its owner for its entries: its own bits back.
        if directory.created && !directory.info.permissions.contains(.ownerReadWriteExecute) { preserve.insert(.permissions) }
        if preserve.isEmpty { return }
        try await setAttributes(preserve, of: directory.info, at: directory.path, followingSymlinks: true)
    }
}
