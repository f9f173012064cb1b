import SystemPackage
import RingIOChannel

extension IO {
    /// The entries of the directory at `path`, or of its whole tree.
    ///
    /// The entries are read in batches (`getdents64`, about a thousand
    /// entries of short names a call) by workers of `IOQueue.global`, ahead
    /// of the loop but never far: at most 16 batches (2 for one directory)
    /// wait to be taken, so a tree of any size is never held in memory.
    /// `.` and `..` are left out. The order is the file system's.
    ///
    /// With `recursive`, subdirectories are listed too, depth-first, up to
    /// four at once (the order between directories then varies from run to
    /// run); a symlink to a directory is an entry of type `.symlink` and is
    /// not followed, so a symlink loop ends nothing. At most 32 directories
    /// are open at once whatever the depth: a directory is reopened by its
    /// path, so a path longer than `PATH_MAX` (4096 bytes) fails with
    /// `ENAMETOOLONG`. A subdirectory removed (or replaced by a file or
    /// symlink) between the read of its parent and its own is skipped; an
    /// entry created or removed during the walk may or may not be listed,
    /// as with `readdir`.
    ///
    /// A relative `path` is resolved against the current directory at the
    /// call; entries carry `path` as given, then their names, which are the
    /// file system's bytes (`FilePath` keeps a name that is not UTF-8).
    ///
    /// ```swift
    /// for try await entry in IO.directoryEntries(at: "Sources", recursive: true) where entry.type == .regular {
    ///     print(entry.path)
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - path: the directory (a symlink to one is followed).
    ///   - recursive: whether to list the subdirectories' entries too.
    /// - Returns: an `AsyncSequence` of ``DirectoryEntry``; ``DirectoryEntries/batched()``
    ///   gives the same entries an array at a time.
    ///   The iteration throws an ``IOError`` with operation `.list` naming the
    ///   directory that failed (`ENOENT`, `ENOTDIR`, `EACCES` for the listed
    ///   directory or any below it, `ECANCELED` when the task is cancelled)
    ///   after the entries read before it; the walk stops there.
    public static func directoryEntries(at path: FilePath, recursive: Bool = false) -> DirectoryEntries {
        DirectoryEntries(path: path, recursive: recursive, limits: recursive ? .recursive : .single)
    }
}

/// The entries of a directory or tree, read in batches
/// (`IO.directoryEntries(at:recursive:)`).
///
/// Each iteration is its own listing. Dropping the iterator (leaving the
/// loop) stops the reading and closes the directories.
public struct DirectoryEntries: AsyncSequence, Sendable {
    /// One entry.
    public typealias Element = DirectoryEntry
    /// A listing's error: operation `.list`, the directory that failed.
    public typealias Failure = IOError

    let path: FilePath
    let recursive: Bool
    let limits: DirectoryWalk.Limits

    package init(path: FilePath, recursive: Bool, limits: DirectoryWalk.Limits) {
        self.path = path
        self.recursive = recursive
        self.limits = limits
    }

    /// A walk of this listing, not started.
    func makeWalk() -> DirectoryWalk {
        let opened = (try? IO.absolute(path).get()) ?? path
        return DirectoryWalk(shown: path, opened: opened, recursive: recursive, limits: limits)
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(owner: DirectoryWalkOwner(makeWalk()))
    }

    /// The same entries, one `getdents64` batch (an array) at a time: one
    /// suspension per batch instead of per entry.
    public func batched() -> Batches { Batches(entries: self) }

    /// The iterator of entries.
    public struct AsyncIterator: AsyncIteratorProtocol {
        public typealias Element = DirectoryEntry
        public typealias Failure = IOError

        let owner: DirectoryWalkOwner
        var batch: [DirectoryEntry] = []
        var index = 0

        /// The walk, for tests (its peak of open directories).
        package var walk: DirectoryWalk { owner.walk }

        public mutating func next(isolation actor: isolated (any Actor)?) async throws(IOError) -> DirectoryEntry? {
            while index == batch.count {
                switch await owner.walk.next() {
                case .batch(let next):
                    batch = next
                    index = 0
                case .end: return nil
                case .failure(let error), .skipped(let error): throw error
                }
            }
            defer { index += 1 }
            return batch[index]
        }

        public mutating func next() async throws(IOError) -> DirectoryEntry? {
            try await next(isolation: nil)
        }
    }

    /// The entries of a listing an array at a time.
    public struct Batches: AsyncSequence, Sendable {
        /// The entries of one `getdents64` batch (never empty).
        public typealias Element = [DirectoryEntry]
        public typealias Failure = IOError

        let entries: DirectoryEntries

        public func makeAsyncIterator() -> AsyncIterator {
            AsyncIterator(owner: DirectoryWalkOwner(entries.makeWalk()))
        }

        /// The iterator of batches.
        public struct AsyncIterator: AsyncIteratorProtocol {
            public typealias Element = [DirectoryEntry]
            public typealias Failure = IOError

            let owner: DirectoryWalkOwner

            /// The walk, for tests (its peak of open directories).
            package var walk: DirectoryWalk { owner.walk }

            public mutating func next(isolation actor: isolated (any Actor)?) async throws(IOError) -> [DirectoryEntry]? {
                switch await owner.walk.next() {
                case .batch(let batch): return batch
                case .end: return nil
                case .failure(let error), .skipped(let error): throw error
                }
            }

            public mutating func next() async throws(IOError) -> [DirectoryEntry]? {
                try await next(isolation: nil)
            }
        }
    }
}
