#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import SystemPackage

/// Whether `openat2` with `RESOLVE_CACHED` (Linux 5.12) works in this
/// process, learned from the errors of the opens themselves: the path
/// channels, `IO.readFile` and `IO.info` open on the caller's thread only
/// through it, and go to the engine when it is off.
///
/// An error turns it off only when it says the call itself is refused,
/// never for one path:
///
/// - `ENOSYS`: no `openat2` (before 5.6), or a seccomp filter that says so:
///   off at once.
/// - `EINVAL`: a kernel of 5.6 to 5.11 that does not know `RESOLVE_CACHED`,
///   but also a path whose file cannot take the flags (`O_DIRECT` on a file
///   system without it, a device that refuses them); `EPERM`: a seccomp
///   filter refusing `openat2`, but also one file (immutable, a fanotify
///   verdict). Either is settled once by a probe that opens `/` (always
///   cached) with `O_PATH` and `RESOLVE_CACHED`: the same error there means
///   the call is refused; success means the error was the path's, and the
///   probe is not made again.
/// - `EAGAIN` (not all cached), `ENOENT`, `EACCES`, `ELOOP`, `EMFILE`, ...:
///   the path's, never the kernel's.
package enum CachedOpens {
    /// What is known of the kernel's support.
    package enum Support: UInt8, Sendable {
        /// Not yet probed: an ambiguous error probes.
        case unknown
        /// The probe opened `/`: every error is the path's.
        case supported
        /// Refused: opens go to the engine from now on.
        case unsupported
    }

    /// What a failed open says.
    package enum Verdict: Equatable, Sendable {
        /// An error of this path only: nothing changes.
        case path
        /// The call is refused here: turn cached opens off.
        case unsupported
        /// Either: probe once to tell.
        case probe
    }

    /// The meaning of `error` from `openat2(..., RESOLVE_CACHED)`, given
    /// what is known.
    package static func verdict(after error: Errno, support: Support) -> Verdict {
        switch error {
        case .noFunction:
            return .unsupported
        case .invalidArgument, .notPermitted:
            return support == .supported ? .path : .probe
        default:
            return .path
        }
    }

    /// What the probe's result (opening `/` with `O_PATH` and
    /// `RESOLVE_CACHED`) says of the support. `EAGAIN` there still means the
    /// flag was understood; an error the probe may not give a second time
    /// (`EMFILE`, `ENOMEM`) leaves it unknown.
    package static func support(afterProbe result: Result<Void, Errno>) -> Support {
        switch result {
        case .success, .failure(.resourceTemporarilyUnavailable):
            return .supported
        case .failure(.noFunction), .failure(.invalidArgument), .failure(.notPermitted):
            return .unsupported
        case .failure:
            return .unknown
        }
    }

    private static let state = Atomic<UInt8>(Support.unknown.rawValue)

    /// The process's knowledge so far.
    package static var support: Support { Support(rawValue: state.load(ordering: .relaxed)) ?? .unknown }

    /// Whether a cached open may be tried (not refused so far).
    @inline(__always)
    package static var available: Bool { state.load(ordering: .relaxed) != Support.unsupported.rawValue }

    /// `Syscall.openCached`, whose failure is noted (`note(_:)`).
    package static func open(_ path: FilePath, flags: CInt) throws(Errno) -> CInt {
        do {
            return try Syscall.openCached(path, flags: flags)
        } catch {
            note(error)
            throw error
        }
    }

    /// Notes a failed cached open: turns them off, or probes, as `verdict` says.
    package static func note(_ error: Errno) {
        let before = support
        let after = learned(after: error, support: before, probe: probeRoot)
        if after != before { state.store(after.rawValue, ordering: .relaxed) }
    }

    /// What is known after `error`, given `support` before it; `probe` is
    /// called only when the error is ambiguous and the support unknown.
    package static func learned(after error: Errno, support: Support,
                                probe: () -> Result<Void, Errno>) -> Support {
        switch verdict(after: error, support: support) {
        case .path: return support
        case .unsupported: return .unsupported
        case .probe: return Self.support(afterProbe: probe())
        }
    }

    /// Opens `/` (always in the dentry cache) with `O_PATH` and `RESOLVE_CACHED`.
    private static func probeRoot() -> Result<Void, Errno> {
        Result { () throws(Errno) in
            let fd = try Syscall.openCached(FilePath("/"), flags: Syscall.pathOnly | O_DIRECTORY | O_CLOEXEC)
            Syscall.closeIgnoringErrors(fd)
        }
    }
}
