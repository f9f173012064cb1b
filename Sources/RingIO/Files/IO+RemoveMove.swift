#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase
import RingIOChannel
import RingIOCopy

extension IO {
    /// Removes the file, symlink or directory at `path`; with
    /// `recursively`, a directory's whole tree.
    ///
    /// A symlink is removed itself, never what it points at. Nothing at
    /// `path` is no error: the count is 0. A tree is removed by up to four
    /// workers of `IOQueue.global` at once, one open directory each; a
    /// file created in a directory while it is being removed is removed
    /// too (a directory is emptied up to eight times before
    /// `ENOTEMPTY` is given up on).
    ///
    /// ```swift
    /// let removed = try await IO.removeItem(at: "build", recursively: true)
    /// ```
    ///
    /// - Parameters:
    ///   - path: what to remove.
    ///   - recursively: whether a non-empty directory is removed with its
    ///     contents (otherwise it fails with `ENOTEMPTY`).
    /// - Returns: how many items (files, links, directories) were removed.
    /// - Throws: an ``IOError`` naming the entry that could not be removed
    ///   (operation `.remove`: `EACCES`, `EPERM`, `EBUSY`, `ENOTEMPTY`;
    ///   `.list` for a directory that could not be read). The removal stops
    ///   there; what was removed before stays removed.
    @discardableResult
    public static func removeItem(at path: FilePath, recursively: Bool = false) async throws(IOError) -> Int {
        if path.isEmpty { throw IOError(.remove, path: path, errno: .invalidArgument) }
        let first = await blocking { () -> Result<Int?, IOError> in
            Result { () throws(IOError) in try removeNow(path) }
        }
        guard let removed = try first.get() else {
            // A directory that is not empty.
            guard recursively else { throw IOError(.remove, path: path, errno: .directoryNotEmpty) }
            let absolute = try IO.absolute(path).mapError { IOError(.remove, path: path, errno: $0) }.get()
            return try await TreeRemoval(root: absolute).run().mapError { error in
                // Name the entry under `path` as given.
                guard !path.isAbsolute, var shown = error.path, shown.starts(with: absolute) else { return error }
                var relative = path
                _ = shown.removePrefix(absolute)
                relative.append(shown.components)
                var renamed = error
                renamed.path = relative
                return renamed
            }.get()
        }
        return removed
    }

    /// Removes `path` if it is not a non-empty directory: the count
    /// removed (0 or 1), or `nil` for a directory that is not empty.
    private static func removeNow(_ path: FilePath) throws(IOError) -> Int? {
        do throws(Errno) {
            try Syscall.withPath(path) { (p) throws(Errno) in try Syscall.unlinkat(AT_FDCWD, p, flags: 0) }
            return 1
        } catch .noSuchFileOrDirectory {
            return 0
        } catch .isDirectory {
            do throws(Errno) {
                try Syscall.withPath(path) { (p) throws(Errno) in
                    try Syscall.unlinkat(AT_FDCWD, p, flags: AT_REMOVEDIR)
                }
                return 1
            } catch .noSuchFileOrDirectory {
                return 0
            } catch .directoryNotEmpty, .fileExists {
                return nil
            } catch {
                throw IOError(.remove, path: path, errno: error)
            }
        } catch {
            throw IOError(.remove, path: path, errno: error)
        }
    }

    /// Moves the file, symlink or directory at `source` to `destination`,
    /// which must not exist.
    ///
    /// A rename where both are on one file system (`renameat2` with
    /// `RENAME_NOREPLACE`: atomic, and never replaces what another process
    /// created there meanwhile); across file systems (`EXDEV`) a copy
    /// (``copyItem(from:to:options:)``) then the removal of `source`.
    ///
    /// - Parameters:
    ///   - source: what to move.
    ///   - destination: its new path.
    /// - Throws: an ``IOError`` with operation `.move` naming `destination`
    ///   (`EEXIST`) or `source` (`ENOENT`, `EACCES`); a copy's or removal's
    ///   error across file systems.
    public static func moveItem(from source: FilePath, to destination: FilePath) async throws(IOError) {
        let renamed = await blocking { () -> Errno? in
            do throws(Errno) {
                try Syscall.rename(source, to: destination, noReplace: true)
                return nil
            } catch .invalidArgument {
                // A file system without RENAME_NOREPLACE: check, then rename.
                if (try? infoNow(at: destination, followingSymlinks: false)) != nil { return .fileExists }
                do throws(Errno) {
                    try Syscall.rename(source, to: destination)
                    return nil
                } catch {
                    return error
                }
            } catch {
                return error
            }
        }
        switch renamed {
        case nil: return
        case .improperLink?:
            try await copyItem(from: source, to: destination)
            try await removeItem(at: source, recursively: true)
        case .fileExists?, .directoryNotEmpty?:
            throw IOError(.move, path: destination, errno: .fileExists)
        case let error?:
            throw IOError(.move, path: source, errno: error)
        }
    }

    /// Runs `body` with a new, empty directory, and removes the directory
    /// and everything in it afterwards, whether `body` returns or throws.
    ///
    /// The directory is made by `mkdtemp` (mode 0700, a unique name) in
    /// `$TMPDIR`, or `/tmp` when it is not set.
    ///
    /// ```swift
    /// let count = try await IO.withTemporaryDirectory { directory in
    ///     try await IO.writeFile(DataChunk("hello".utf8), to: directory.appending("greeting"))
    ///     return try await IO.info(at: directory.appending("greeting")).size
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - isolation: Where `body` runs: the caller's actor (the main
    ///     actor, say), so `body` need not be `Sendable`. Leave it out.
    ///   - body: the work; its argument is the directory's absolute path.
    /// - Returns: what `body` returned.
    /// - Throws: `body`'s error; else an ``IOError`` from creating
    ///   (`.create`) or removing (`.remove`) the directory.
    public static func withTemporaryDirectory<R: Sendable>(
        isolation: isolated (any Actor)? = #isolation, _ body: (FilePath) async throws -> R
    ) async throws -> R {
        var base = FilePath("/tmp")
        if let tmp = getenv("TMPDIR"), tmp[0] != 0 { base = FilePath(platformString: tmp) }
        let template = base.appending("ringio-XXXXXX")
        let made = await blocking { () -> Result<FilePath, IOError> in
            Result { () throws(IOError) in
                do throws(Errno) { return try Syscall.mkdtemp(template) } catch {
                    throw IOError(.create, path: template, errno: error)
                }
            }
        }
        let directory = try made.get()
        let result: R
        do {
            result = try await body(directory)
        } catch {
            _ = try? await removeItem(at: directory, recursively: true)
            throw error
        }
        try await removeItem(at: directory, recursively: true)
        return result
    }
}
