#if DEBUG
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import SystemPackage

extension Syscall {
    /// A debug build's fault injection: makes one named call fail with a
    /// chosen `Errno`, for a test.
    ///
    /// An injection is scoped so that tests running in parallel (Swift
    /// Testing runs them so) do not take each other's faults:
    ///
    /// - `.callingThread`: only calls made on the thread that injected (a
    ///   unit test calling `Syscall` itself);
    /// - `.files(under: directory)`: calls on any thread whose descriptor
    ///   or path is a file under `directory` (an operation the library runs
    ///   on a pool worker or its ring thread, on the test's own temporary
    ///   files). Descriptors are resolved through `/proc/self/fd`, and only
    ///   while an injection is pending.
    ///
    /// ```swift
    /// let exdev = Syscall.Mock.inject(.copyFileRange, errno: .crossDevice, times: 1,
    ///                                 scope: .files(under: directory))
    /// defer { exdev.remove() }
    /// // ... the copy ...
    /// #expect(exdev.fired == 1)
    /// ```
    ///
    /// A release build has no `Mock`: `retryingInterrupts` and `once` then
    /// call straight through (the check is compiled out with `#if DEBUG`).
    /// With nothing injected a debug build pays one atomic load per call.
    package enum Mock {
        /// Which calls an injection applies to.
        package enum Scope: Sendable {
            /// Calls made on the injecting thread.
            case callingThread
            /// Calls, on any thread, on a file under a directory.
            case files(under: FilePath)
        }

        /// One pending fault: fails its call `remaining` more times.
        package final class Injection: Sendable {
            /// The call it fails.
            package let call: Call
            /// The error it fails with.
            package let errno: Errno
            fileprivate let scope: ResolvedScope
            private let counts: Locked<(skip: Int, remaining: Int, fired: Int)>

            fileprivate init(call: Call, errno: Errno, times: Int, after skip: Int, scope: ResolvedScope) {
                self.call = call
                self.errno = errno
                self.scope = scope
                counts = Locked((skip, times, 0))
            }

            /// How many calls it has failed so far.
            package var fired: Int { counts.withLock { $0.fired } }

            /// How many more calls it will fail.
            package var remaining: Int { counts.withLock { $0.remaining } }

            /// Withdraws it (whatever it has left); idempotent.
            package func remove() {
                counts.withLock { $0.remaining = 0 }
                Mock.drop(self)
            }

            /// Takes one firing; false while calls are let through first, or
            /// when none is left.
            fileprivate func take() -> Bool {
                counts.withLock {
                    guard $0.remaining > 0 else { return false }
                    if $0.skip > 0 {
                        $0.skip -= 1
                        return false
                    }
                    $0.remaining -= 1
                    $0.fired += 1
                    return true
                }
            }
        }

        fileprivate enum ResolvedScope: Sendable {
            case thread(UInt)
            case directory(String)
        }

        /// The injections not yet used up; `pending` mirrors their count,
        /// so that a call with none pending pays one relaxed load.
        private static let injections = Locked<[Injection]>([])
        private static let pending = Atomic<Int>(0)

        /// Makes `call` fail with `errno` the next `times` times it is
        /// made within `scope`, after letting `after` such calls through
        /// (a failure in the middle of a copy).
        ///
        /// - Parameters:
        ///   - call: The call (`.copyFileRange`, `.pread`, ...).
        ///   - errno: What it fails with (`.interrupted` is retried by
        ///     `retryingInterrupts`, as a real one is).
        ///   - times: How many calls fail; then the real call runs again.
        ///   - after: How many matching calls run for real first.
        ///   - scope: Which calls count (see `Scope`).
        /// - Returns: The injection: read `fired`, call `remove()` when done.
        @discardableResult
        package static func inject(_ call: Call, errno: Errno, times: Int = 1, after: Int = 0,
                                   scope: Scope) -> Injection {
            let resolved: ResolvedScope
            switch scope {
            case .callingThread:
                resolved = .thread(UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(bitPattern: UInt(pthread_self())))))
            case .files(let directory):
                resolved = .directory(canonical(directory.string))
            }
            let injection = Injection(call: call, errno: errno, times: times, after: after, scope: resolved)
            injections.withLock {
                $0.append(injection)
                pending.store($0.count, ordering: .relaxed)
            }
            return injection
        }

        /// Removes every injection (a test's cleanup after a failure).
        package static func removeAll() {
            injections.withLock {
                $0.removeAll()
                pending.store(0, ordering: .relaxed)
            }
        }

        fileprivate static func drop(_ injection: Injection) {
            injections.withLock {
                $0.removeAll { $0 === injection }
                pending.store($0.count, ordering: .relaxed)
            }
        }

        /// The fault injected for this call, if any (and counts it).
        ///
        /// - Parameters:
        ///   - call: The call about to be made.
        ///   - target: Its descriptors or paths.
        /// - Returns: The `Errno` to fail it with, or `nil` to make it.
        package static func fault(for call: Call, _ target: Target) -> Errno? {
            if pending.load(ordering: .relaxed) == 0 { return nil }
            let candidates = injections.withLock { $0.filter { $0.call == call } }
            if candidates.isEmpty { return nil }
            var files: [String]? = nil
            for injection in candidates {
                switch injection.scope {
                case .thread(let thread):
                    let me = UInt(bitPattern: Int(bitPattern: UnsafeRawPointer(bitPattern: UInt(pthread_self()))))
                    guard thread == me else { continue }
                case .directory(let directory):
                    if files == nil { files = paths(of: target) }
                    guard files!.contains(where: { $0 == directory || $0.hasPrefix(directory + "/") }) else { continue }
                }
                if injection.take() {
                    if injection.remaining == 0 { drop(injection) }
                    return injection.errno
                }
            }
            return nil
        }

        /// The absolute paths a call works on, as far as they can be known.
        private static func paths(of target: Target) -> [String] {
            switch target {
            case .none: return []
            case .fd(let fd): return [pathOf(fd)].compactMap { $0 }
            case .fds(let a, let b): return [pathOf(a), pathOf(b)].compactMap { $0 }
            case .path(let path, let directory): return [absolute(path, directory)].compactMap { $0 }
            case .paths(let a, let b, let directory):
                return [absolute(a, directory), absolute(b, directory)].compactMap { $0 }
            }
        }

        private static func absolute(_ path: UnsafePointer<CChar>, _ directory: CInt) -> String? {
            let string = String(cString: path)
            if string.hasPrefix("/") { return string }
            let base: String?
            if directory == AT_FDCWD {
                base = try? Syscall.getcwd().string
            } else {
                base = pathOf(directory)
            }
            return base.map { $0 + "/" + string }
        }

        private static func pathOf(_ fd: CInt) -> String? {
            guard fd >= 0 else { return nil }
            var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let n = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
            guard n > 0 else { return nil }
            return String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }

        private static func canonical(_ path: String) -> String {
            guard let resolved = realpath(path, nil) else { return path }
            defer { free(resolved) }
            return String(cString: resolved)
        }
    }
}
#endif
