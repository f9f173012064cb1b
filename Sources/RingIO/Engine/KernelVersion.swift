#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The running kernel's release, for features that io_uring's opcode probe
/// cannot show (flags of an opcode: multishot polls, the boot-time clock of
/// timeouts).
///
/// The corresponding C function is `uname`.
package struct KernelVersion: Comparable, Sendable, CustomStringConvertible {
    package var major: Int
    package var minor: Int

    package init(_ major: Int, _ minor: Int) {
        self.major = major
        self.minor = minor
    }

    /// Parses the leading "MAJOR.MINOR" of a release string ("6.18.44-fc").
    package init?(release: String) {
        let parts = release.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
        guard parts.count == 2 else { return nil }
        self.init(parts[0], parts[1])
    }

    /// The running kernel (0.0 when `uname` fails: every feature is then
    /// taken as missing, and the fallbacks run).
    package static let running: KernelVersion = {
        var name = utsname()
        guard uname(&name) == 0 else { return KernelVersion(0, 0) }
        let release = withUnsafeBytes(of: &name.release) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        return KernelVersion(release: release) ?? KernelVersion(0, 0)
    }()

    package static func < (a: KernelVersion, b: KernelVersion) -> Bool {
        (a.major, a.minor) < (b.major, b.minor)
    }

    package var description: String { "\(major).\(minor)" }
}
