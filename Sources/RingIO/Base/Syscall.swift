#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage

/// The library's one seam for system calls.
///
/// Every system call the library makes outside io_uring itself goes through
/// a static function of `Syscall` (or through swift-system, called from
/// one of them), so that there is one place that:
///
/// - retries `EINTR`: `retryingInterrupts(_:_:_:)` calls the function again
///   while it fails with `EINTR`; `close` is the one exception (`once`): on
///   Linux the descriptor is released whatever `close` returns, and a second
///   `close` could close a descriptor another thread was just given;
/// - reads `errno`: `valueOrErrno(_:)` turns a C function's `-1` into the
///   `Errno` it set, read right after the call (nothing in between may
///   change it);
/// - names each call (`Syscall.Call`), which a debug build's mock
///   (`Syscall.Mock`) can make fail with a chosen `Errno` for a test.
///
/// The conventions, for every file `Syscall+<Area>.swift`:
///
/// - a function is `package static`, named after its C function
///   (`copyFileRange` for `copy_file_range`), takes swift-system types
///   where they fit (`FileDescriptor`, `FilePath`, `FilePermissions`), and
///   `throws(Errno)`; it returns what the C function returns on success
///   (a count, a descriptor, a `Stat`), `Void` for a bare `0`;
/// - its doc comment ends with "The corresponding C function is `x`.";
/// - its body is one `retryingInterrupts(.name, target) { ... }` around
///   either swift-system's call (with `retryOnInterrupt: false`: the retry
///   is here) or the C function inside `valueOrErrno(_:)`;
/// - its `Call` is a `static let` in the same file (`extension Syscall.Call`).
///
/// ```swift
/// let copied = try Syscall.copyFileRange(from: input, to: output, count: 1 << 20)
/// ```
///
/// Code outside `Base/Syscall*.swift` makes no system call itself
/// (`scripts/check-syscalls` checks it); the engine's io_uring calls go
/// through liburing, and the thread and lock primitives stay in Base.
package enum Syscall {}

extension Syscall {
    /// The name of one system call, as the mock and the check know it.
    ///
    /// Each area's file declares its calls: `extension Syscall.Call {
    /// package static let splice = Syscall.Call("splice") }`. The name is
    /// the C function's.
    package struct Call: Hashable, Sendable, CustomStringConvertible {
        /// The C function's name (`"copy_file_range"`).
        package let name: String

        /// A call named after its C function.
        package init(_ name: String) { self.name = name }

        package var description: String { name }
    }

    /// What a call works on, for a mock scoped to the files of one
    /// directory: its descriptors, or a path (relative to a directory
    /// descriptor, or to the working directory).
    package enum Target {
        /// Nothing the mock can match against a directory.
        case none
        /// One descriptor.
        case fd(CInt)
        /// Two descriptors (a copy's source and destination).
        case fds(CInt, CInt)
        /// A path, relative to `directory` (`AT_FDCWD`: the working directory).
        case path(UnsafePointer<CChar>, relativeTo: CInt)
        /// Two paths (a rename's old and new).
        case paths(UnsafePointer<CChar>, UnsafePointer<CChar>, relativeTo: CInt)
    }
}

extension Syscall {
    /// Runs `body` until it returns or fails with something other than
    /// `EINTR`: the library's one way of retrying an interrupted call.
    ///
    /// In a debug build each attempt first asks `Syscall.Mock` whether a
    /// test injected a failure for `call` on `target`: an injected `EINTR`
    /// is retried like a real one; anything else is thrown without calling
    /// `body`.
    ///
    /// - Parameters:
    ///   - call: The call's name (for the mock).
    ///   - target: What it works on (for a mock scoped to a directory).
    ///   - body: The call: swift-system's with `retryOnInterrupt: false`, or
    ///     a C function inside `valueOrErrno(_:)`.
    /// - Returns: What `body` returned.
    /// - Throws: The `Errno` it failed with, never `.interrupted`.
    @inline(__always)
    package static func retryingInterrupts<T>(
        _ call: Call, _ target: Target = .none, _ body: () throws(Errno) -> T
    ) throws(Errno) -> T {
        while true {
            do throws(Errno) {
                #if DEBUG
                if let injected = Mock.fault(for: call, target) { throw injected }
                #endif
                return try body()
            } catch .interrupted {
                continue
            }
        }
    }

    /// Runs `body` once (for `close`, which is never retried): in a debug
    /// build the mock may fail it first, `EINTR` included.
    ///
    /// - Parameters:
    ///   - call: The call's name (for the mock).
    ///   - target: What it works on.
    ///   - body: The call.
    /// - Returns: What `body` returned.
    /// - Throws: The `Errno` it failed with.
    @inline(__always)
    package static func once<T>(_ call: Call, _ target: Target = .none, _ body: () throws(Errno) -> T) throws(Errno) -> T {
        #if DEBUG
        if let injected = Mock.fault(for: call, target) { throw injected }
        #endif
        return try body()
    }

    /// `result`, or the `Errno` the C function set when it returned `-1`:
    /// the library's one way of reading `errno`.
    ///
    /// - Parameter result: What a C function that sets `errno` returned.
    /// - Returns: `result`, when it is not `-1`.
    /// - Throws: `errno`, read at once.
    @inline(__always)
    package static func valueOrErrno<I: FixedWidthInteger>(_ result: I) throws(Errno) -> I {
        if result == -1 { throw Errno(rawValue: cliburing_errno()) }
        return result
    }

    /// `result`, or the `Errno` it carries negated (a shim or io_uring
    /// style function that returns `-errno`).
    ///
    /// - Parameter result: What the function returned.
    /// - Returns: `result`, when it is not negative.
    /// - Throws: `Errno(rawValue: -result)`.
    @inline(__always)
    package static func valueOrNegatedErrno<I: FixedWidthInteger & SignedInteger>(_ result: I) throws(Errno) -> I {
        if result < 0 { throw Errno(rawValue: CInt(truncatingIfNeeded: -result)) }
        return result
    }
}

extension Syscall {
    /// Runs `body` with `path` as a C string (swift-system's
    /// `withPlatformString`, with the typed error).
    ///
    /// - Parameters:
    ///   - path: The path.
    ///   - body: What uses it.
    /// - Returns: What `body` returned.
    /// - Throws: What `body` threw.
    @inline(__always)
    package static func withPath<T>(_ path: FilePath, _ body: (UnsafePointer<CChar>) throws(Errno) -> T) throws(Errno) -> T {
        try path.withPlatformString { p in Result { () throws(Errno) in try body(p) } }.get()
    }

    /// `body`'s result the way io_uring reports one: the value (clamped to
    /// `Int32`), or `-errno` (the thread-pool backend's completions).
    ///
    /// - Parameter body: One or more calls of this namespace.
    /// - Returns: The value, or the negated `Errno` it threw.
    @inline(__always)
    package static func negatedErrno<I: BinaryInteger>(_ body: () throws(Errno) -> I) -> Int32 {
        do {
            return Int32(clamping: try body())
        } catch {
            return -error.rawValue
        }
    }
}
