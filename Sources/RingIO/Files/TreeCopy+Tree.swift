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

/// The walk of a directory tree: directories made as the walk lists them,
/// the other entries copied in batches, directory attributes set last,
/// deepest first.
extension TreeCopy {
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
        // keep the cores busy while a batch waits (a preempted worker);
        // `ringcp -r` of 2,000 files on 2 cores ran 0.56-0.66x cp's time
        // with two at once, 0.40-0.49x with eight, for the same CPU
        // (Benchmarks/results/copy.md). But at most two per core write into
        // one directory (`TreeCopySlots`: its creates take its lock in turn).
        // With `atomically` too: each file's temporary is made and renamed in
        // the batch, relative to the destination directory. One entry at a
        // time with `width` 1.
        let batchSize = width == 1 ? 1 : Self.largestBatch
        let cores = Syscall.onlineProcessors()
        let tasks = max(1, min(width, Self.batchesPerCore * cores))
        let result = await withTaskGroup(of: BatchDone.self, returning: IOError?.self) { group in
            var slots = TreeCopySlots(tasks: tasks, perDirectory: Self.batchesPerCoreInOneDirectory * cores)
            var failure: IOError?
            var pending: [FileJob] = []
            /// Waits for one batch to finish; throws its error.
            func reap(_ group: inout TaskGroup<BatchDone>) async throws(IOError) {
                guard let done = await group.next() else { return }
                slots.finish(in: done.directory)
                if let error = done.error { throw error }
            }
            /// The pending entries, as one task (once a slot is free for their directory).
            func flush(_ group: inout TaskGroup<BatchDone>) async throws(IOError) {
                guard let first = pending.first else { return }
                let directory = first.destination.removingLastComponent()
                while !slots.canStart(in: directory) && slots.running > 0 { try await reap(&group) }
                slots.start(in: directory)
                let jobs = pending
                pending = []
                group.addTask {
                    do throws(IOError) {
                        try await copyFiles(jobs)
                        return BatchDone(directory: directory, error: nil)
                    } catch {
                        return BatchDone(directory: directory, error: error)
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
                            if width == 1, slots.running > 0 { try await reap(&group) }
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
                            if width == 1, slots.running > 0 { try await reap(&group) }
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
                if failure == nil, let error = done.error { failure = error }
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

    /// What a batch task returns: the directory it wrote into, and its error.
    struct BatchDone: Sendable {
        let directory: FilePath
        let error: IOError?
    }
}
