import SystemPackage
import Testing
@testable import RingIOBase

/// Which `openat2(RESOLVE_CACHED)` errors turn the cached opens off for the
/// whole process (the call is refused here) and which belong to one path.
/// No kernel: the probe is a closure.
@Suite("Cached opens: which errno means what")
struct CachedOpensTests {
    /// A probe that must not run.
    static func noProbe() -> Result<Void, Errno> {
        Issue.record("probed")
        return .success(())
    }

    @Test("ENOSYS turns them off at once, without a probe")
    func noFunction() {
        #expect(CachedOpens.verdict(after: .noFunction, support: .unknown) == .unsupported)
        #expect(CachedOpens.learned(after: .noFunction, support: .unknown, probe: Self.noProbe) == .unsupported)
    }

    @Test("a path's own errors never turn them off, nor probe",
          arguments: [Errno.resourceTemporarilyUnavailable, .noSuchFileOrDirectory, .permissionDenied,
                      .tooManySymbolicLinkLevels, .notDirectory, .tooManyOpenFiles, .isDirectory,
                      .noSuchAddressOrDevice, .readOnlyFileSystem])
    func pathErrors(error: Errno) {
        for support in [CachedOpens.Support.unknown, .supported] {
            #expect(CachedOpens.verdict(after: error, support: support) == .path)
            #expect(CachedOpens.learned(after: error, support: support, probe: Self.noProbe) == support)
        }
    }

    @Test("EINVAL and EPERM probe: the same error on / means refused, success means the path's",
          arguments: [Errno.invalidArgument, .notPermitted])
    func ambiguous(error: Errno) {
        #expect(CachedOpens.verdict(after: error, support: .unknown) == .probe)
        // The probe opens /: it works, so the error was this path's (a file
        // system without O_DIRECT, an immutable file, a fanotify verdict).
        var probes = 0
        let kept = CachedOpens.learned(after: error, support: .unknown) { probes += 1; return .success(()) }
        #expect(kept == .supported && probes == 1)
        // Once known to work, the same error is the path's, with no probe.
        #expect(CachedOpens.verdict(after: error, support: .supported) == .path)
        #expect(CachedOpens.learned(after: error, support: .supported, probe: Self.noProbe) == .supported)
        // The probe fails the same way (a 5.6-5.11 kernel that does not
        // know RESOLVE_CACHED, a seccomp filter): refused.
        #expect(CachedOpens.learned(after: error, support: .unknown) { .failure(error) } == .unsupported)
    }

    @Test("the probe's answer: EAGAIN still means the flag is known; EMFILE tells nothing")
    func probeAnswers() {
        #expect(CachedOpens.support(afterProbe: .success(())) == .supported)
        #expect(CachedOpens.support(afterProbe: .failure(.resourceTemporarilyUnavailable)) == .supported)
        #expect(CachedOpens.support(afterProbe: .failure(.noFunction)) == .unsupported)
        #expect(CachedOpens.support(afterProbe: .failure(.invalidArgument)) == .unsupported)
        #expect(CachedOpens.support(afterProbe: .failure(.notPermitted)) == .unsupported)
        #expect(CachedOpens.support(afterProbe: .failure(.tooManyOpenFiles)) == .unknown)
        // Unknown after a probe that told nothing: the next ambiguous error probes again.
        var probes = 0
        #expect(CachedOpens.learned(after: .invalidArgument, support: .unknown) {
            probes += 1
            return .failure(.tooManyOpenFiles)
        } == .unknown)
        #expect(probes == 1)
    }
}
