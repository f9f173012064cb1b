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
    /// Copies the file, symlink or directory tree at `source` to
    /// `destination`.
    ///
    /// A regular file is copied with ``copyFile(from:to:options:engine:)``
    /// and `options` (the copy engine: its plan chooses how the bytes
    /// move); a symlink is created anew with the same target (never
    /// followed, unless `options.followSymlinks` says so); a directory is
    /// created with the source's permissions and its tree copied: entries
    /// listed by ``directoryEntries(at:recursive:)`` (never more than 32
    /// directories open), up to `options.maximumConcurrentCopies` files
    /// copied at once. A directory's regular files go in batches of up to
    /// 32 (up to `maximumConcurrentCopies` batches at once, at most four
    /// per core), each copied on one worker of `IOQueue.global`, opened by
    /// its name relative to the two directories: one hand-off for the
    /// batch, not one per file (a file larger than `IO.smallFileLimit` is
    /// then copied on its own). With `options.atomically`, each is written
    /// under a temporary name in its directory and renamed onto its own. A
    /// directory already at a directory's destination is used, unless
    /// `options.exclusive`. A symlink the copy creates is never
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
    ///     `preserve`: the metadata every entry takes; `followSymlinks`,
    ///     `maximumConcurrentCopies`).
    /// - Throws: an ``IOError`` naming the entry that failed and its side;
    ///   the copy stops there (what was copied stays; a file that failed
    ///   leaves nothing under its name).
    public static func copyItem(from source: FilePath, to destination: FilePath,
                                options: CopyOptions = .init()) async throws(IOError) {
        try await TreeCopy(options: options, handlers: nil).copyItem(from: source, to: destination)
    }

    /// Copies the file, symlink or directory tree at `source` to
    /// `destination` as ``copyItem(from:to:options:)`` does, asking
    /// `onEntry` about each entry before it is copied and `onError` about
    /// each failure.
    ///
    /// `onEntry` is called once for every entry, `source` itself first,
    /// with its path on both sides and its type (a symlink that
    /// `options.followSymlinks` follows has the type of what it names). Its
    /// answer says what happens to it:
    /// - ``CopyItemAction/copy``: the copy does it, as `copyItem(from:to:options:)` would
    ///   (a directory is made, its entries visited, its attributes set at the end);
    /// - ``CopyItemAction/skip``: nothing (a directory's entries are not visited);
    /// - ``CopyItemAction/copied``: the handler has copied it itself (a
    ///   directory: the handler made the directory, or chose to use the one
    ///   there; its entries are visited, and nothing is set on it).
    ///
    /// A directory's `onEntry` returns before any of its entries' is
    /// called; entries that are not directories are handled up to
    /// `options.maximumConcurrentCopies` at once, so both handlers must be
    /// safe to call from several tasks. With `maximumConcurrentCopies` 1,
    /// every call comes in the order the entries are listed, one at a time.
    ///
    /// `onError` gets each failure of the copy's own work: the source that
    /// cannot be stat'ed, a directory that cannot be listed or made, an
    /// entry answered `.copy` that fails, a symlink loop. ``CopyItemErrorAction/stop``
    /// ends the copy, which throws that error; ``CopyItemErrorAction/continue`` goes on
    /// without the entry (a directory: without its entries), and the copy
    /// then returns normally. Cancelling the task stops the copy with
    /// `ECANCELED` whatever `onError` says. This is how `ringcp -r`
    /// applies cp's rules (`-n`, `-i`, `-u`, backups, messages) and goes on
    /// after an error, as cp does:
    ///
    /// ```swift
    /// try await IO.copyItem(from: "photos", to: "/mnt/usb/photos", onEntry: { entry in
    ///     // Leave out what is already there; copy the rest.
    ///     if entry.type != .directory, (try? await IO.info(at: entry.destination)) != nil { return .skip }
    ///     return .copy
    /// }, onError: { error in
    ///     print("not copied: \(error)")
    ///     return .continue
    /// })
    /// ```
    ///
    /// - Throws: the ``IOError`` that `onError` answered `.stop` to, or `ECANCELED`.
    public static func copyItem(from source: FilePath, to destination: FilePath, options: CopyOptions = .init(),
                                onEntry: @escaping @Sendable (CopyItemEntry) async -> CopyItemAction,
                                onError: @escaping @Sendable (IOError) async -> CopyItemErrorAction = { _ in .stop })
        async throws(IOError) {
        try await TreeCopy(options: options, handlers: TreeCopy.Handlers(onEntry: onEntry, onError: onError))
            .copyItem(from: source, to: destination)
    }

    /// One entry that ``copyItem(from:to:options:onEntry:onError:)`` is about to copy.
    public struct CopyItemEntry: Sendable, Hashable {
        /// The entry: the source as given, then the names down to it.
        public var source: FilePath
        /// Where its copy goes: the destination as given, then the same names.
        public var destination: FilePath
        /// What it is (for a followed symlink, what it names).
        public var type: FileInfo.FileType
        /// The item the copy was called with, not an entry below it.
        public var isTop: Bool

        /// An entry; the copy makes them.
        public init(source: FilePath, destination: FilePath, type: FileInfo.FileType, isTop: Bool) {
            self.source = source
            self.destination = destination
            self.type = type
            self.isTop = isTop
        }
    }

    /// What ``copyItem(from:to:options:onEntry:onError:)`` does with an entry.
    public enum CopyItemAction: Sendable, Hashable {
        /// Copy it (a directory: make it and visit its entries).
        case copy
        /// Leave it (a directory: and its entries) out.
        case skip
        /// The handler copied it (a directory: made it, or uses the one there); visit a directory's entries.
        case copied
    }

    /// What ``copyItem(from:to:options:onEntry:onError:)`` does after a failure.
    public enum CopyItemErrorAction: Sendable, Hashable {
        /// End the copy, throwing the error.
        case stop
        /// Go on with the other entries.
        case `continue`
    }
}

/// One `copyItem`: its options and the caller's handlers (nil: copy every
/// entry, stop at the first error).
private struct TreeCopy: Sendable {
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

    /// A directory and everything under it.
    /// - Parameter make: the copy makes `destination` (else the caller's `onEntry` did).
    func copyTree(from source: FilePath, to destination: FilePath, info: FileInfo, make: Bool,
                  ancestors: [Identity]) async throws(IOError) {
        // Finished deepest first, once every entry is copied (one record a
        // directory the copy made: the walk lists each before its entries).
        var directories: [TreeDirectory] = []
        if make {
            do throws(IOError) {
                let created = try await makeDirectory(destination, permissions: info.permissions)
                directories.append(TreeDirectory(path: destination, info: info, created: created))
            } catch {
                return try await failed(error)
            }
        }
        let follows = options.followSymlinks == .always
        let ancestors = ancestors + [Identity(info)]
        // The directories of this walk by path (only to find a followed symlink's ancestors).
        var identities: [FilePath: Identity] = [:]
        // Directories whose entries are left out (skipped, or failed).
        var skipped: [FilePath] = []
        func isSkipped(_ path: FilePath) -> Bool { !skipped.isEmpty && skipped.contains { path.starts(with: $0) } }
        let opened = (try? IO.absolute(source).get()) ?? source
        let owner = DirectoryWalkOwner(DirectoryWalk(shown: source, opened: opened, recursive: true, limits: .recursive,
                                                     continuesAfterFailures: handlers != nil))
        let width = max(1, options.maximumConcurrentCopies)
        // Entries that are not directories go in batches of up to 32 of one
        // directory's entries, each a task copying them one after another:
        // one task and one pool hand-off for many small files. Up to `width`
        // batches run at once, at most four per core: more tasks than cores
        // keep the cores busy while a batch waits (a directory's lock, a
        // preempted worker); `ringcp -r` of 2,000 files on 2 cores ran
        // 0.56-0.66x cp's time with two at once, 0.40-0.49x with eight, for
        // the same CPU (Benchmarks/results/copy.md). With `atomically` too:
        // each file's temporary is made and renamed in the batch, relative
        // to the destination directory. One entry at a time with `width` 1.
        let batchSize = width == 1 ? 1 : Self.largestBatch
        let tasks = max(1, min(width, Self.batchesPerCore * Syscall.onlineProcessors()))
        let result = await withTaskGroup(of: IOError?.self, returning: IOError?.self) { group in
            var running = 0
            var failure: IOError?
            var pending: [FileJob] = []
            /// The pending entries, as one task (once fewer than `tasks` run).
            func flush(_ group: inout TaskGroup<IOError?>) async throws(IOError) {
                guard !pending.isEmpty else { return }
                if running == tasks, let done = await group.next() {
                    running -= 1
                    if let done { throw done }
                }
                running += 1
                let jobs = pending
                pending = []
                group.addTask {
                    do throws(IOError) {
                        try await copyFiles(jobs)
                        return nil
                    } catch {
                        return error
                    }
                }
            }
            do throws(IOError) {
                walk: while true {
                    let entries: [DirectoryEntry]
                    switch await owner.walk.next() {
                    case .end:
                        break walk
                    case .batch(let batch):
                        entries = batch
                    case .failure(var error), .skipped(var error):
                        // The walk's own errors (a directory that cannot be listed) are the source's.
                        if error.side == nil { error.side = .source }
                        if error.errno == .canceled { throw error }
                        if error.path.map(isSkipped) != true { try await failed(error) }
                        continue walk
                    }
                    // One directory's entries: the path of its copy made once, each entry's from its name.
                    var targetDirectory: FilePath?
                    if let first = entries.first {
                        var relative = first.path.removingLastComponent()
                        if relative.removePrefix(source) { targetDirectory = destination.appending(relative.components) }
                    }
                    for entry in entries where !isSkipped(entry.path) {
                        let target: FilePath
                        if let targetDirectory, let name = entry.path.lastComponent {
                            target = targetDirectory.appending(name)
                        } else {
                            var relative = entry.path
                            _ = relative.removePrefix(source)
                            target = destination.appending(relative.components)
                        }
                        var type = entry.type
                        var found: FileInfo?
                        if type == .symlink && follows {
                            do throws(IOError) {
                                let named = try await sourceInfo(entry.path, following: true)
                                found = named
                                type = named.type
                            } catch {
                                try await failed(error)
                                continue
                            }
                        }
                        if type == .directory && entry.type == .symlink, let named = found {
                            if width == 1, running > 0, let done = await group.next() {
                                running -= 1
                                if let done { throw done }
                            }
                            // A followed symlink to a directory: its tree, unless it contains the link.
                            var chain = ancestors
                            var parent = entry.path.removingLastComponent()
                            while parent != source && parent.starts(with: source) {
                                if let identity = identities[parent] { chain.append(identity) }
                                parent = parent.removingLastComponent()
                            }
                            if chain.contains(Identity(named)) {
                                try await failed(IOError(.list, path: entry.path, side: .source,
                                                         errno: .tooManySymbolicLinkLevels))
                                continue
                            }
                            try await copyEntry(entry.path, to: target, info: named, isTop: false, ancestors: chain)
                            continue
                        }
                        if type == .directory {
                            // One at a time: the file before it is done first.
                            if width == 1, running > 0, let done = await group.next() {
                                running -= 1
                                if let done { throw done }
                            }
                            // Before its entries: the walk lists a directory in
                            // its parent's batch, before it opens it.
                            let action = await action(IO.CopyItemEntry(source: entry.path, destination: target,
                                                                        type: .directory, isTop: false))
                            if action == .skip {
                                skipped.append(entry.path)
                                continue
                            }
                            if action == .copied && !follows { continue }
                            do throws(IOError) {
                                let found = try await sourceInfo(entry.path)
                                if follows { identities[entry.path] = Identity(found) }
                                if action == .copy {
                                    let made = try await makeDirectory(target, permissions: found.permissions)
                                    directories.append(TreeDirectory(path: target, info: found, created: made))
                                }
                            } catch {
                                skipped.append(entry.path)
                                try await failed(error)
                            }
                            continue
                        }
                        let own = entry.type == .symlink && type == .symlink ? nil : found
                        pending.append(FileJob(source: entry.path, destination: target, type: type, info: own))
                        if pending.count == batchSize { try await flush(&group) }
                    }
                    // A batch holds the entries of one directory.
                    try await flush(&group)
                }
            } catch {
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
                try? await finishDirectory(directory, preserving: [])
            }
            throw result
        }
        for directory in directories.reversed() {
            do throws(IOError) {
                try await finishDirectory(directory, preserving: options.preserve)
            } catch {
                try await failed(error)
            }
        }
    }
}
