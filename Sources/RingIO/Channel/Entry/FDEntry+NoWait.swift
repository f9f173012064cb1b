#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Synchronization
import SystemPackage
import RingIOBase

/// Whether a file system answers `preadv2(..., RWF_NOWAIT)` from the page
/// cache: known per device (`st_dev`) once its first inline read tried.
///
/// On this kernel (6.18) ext4 reads do; tmpfs fails every one with
/// `EOPNOTSUPP`, and so would every read of it, at the cost of a system call
/// each, if it were asked again: it is asked once per device.
package enum NoWaitReads: UInt8 {
    case unknown = 0, supported = 1, unsupported = 2

    private static let devices = Locked<[UInt64: NoWaitReads]>([:])
    /// The last device learned, `device << 8 | answer` (0: none), read
    /// without the lock: files opened one after another are mostly on one
    /// device, and each entry asks once.
    private static let last = Atomic<UInt64>(0)

    /// What is known of `device` so far.
    package static func of(device: UInt64) -> NoWaitReads {
        let cached = last.load(ordering: .relaxed)
        if cached != 0, cached >> 8 == device, let answer = NoWaitReads(rawValue: UInt8(truncatingIfNeeded: cached)) {
            return answer
        }
        return devices.withLock { $0[device] ?? .unknown }
    }

    /// The first inline read on `device` said.
    package static func learn(_ answer: NoWaitReads, device: UInt64) {
        devices.withLock {
            $0[device] = answer
            // (Only a device number that fits; any other asks the lock.)
            last.store(device >> 56 == 0 ? device << 8 | UInt64(answer.rawValue) : 0, ordering: .relaxed)
        }
    }
}

extension FDEntry {
    /// Whether a read of this fd may try `preadv2(RWF_NOWAIT)` on the calling
    /// thread first: a regular file, not in direct-I/O mode, on a file
    /// system not known to refuse it.
    var mayReadInline: Bool {
        isRegular && noWait.load(ordering: .relaxed) != NoWaitReads.unsupported.rawValue
            && directAlignment == nil
    }

    /// An inline `preadv2(RWF_NOWAIT)` failed with `error`: what it says of
    /// the file system (`EOPNOTSUPP`: it refuses them; `EAGAIN`: it answers
    /// them, these pages were not cached) is learned, and the fallback to
    /// the engine counted.
    func inlineReadFailed(_ error: Errno) {
        if error.rawValue == EOPNOTSUPP {
            learnNoWait(supported: false)
        } else if error == .resourceTemporarilyUnavailable {
            learnNoWait(supported: true)
        }
        inlineFallbacks.wrappingAdd(1, ordering: .relaxed)
    }

    /// What an inline read learned of the file system: `EOPNOTSUPP`, or any
    /// other answer (the first tells every entry of the device made later).
    func learnNoWait(supported: Bool) {
        let answer: NoWaitReads = supported ? .supported : .unsupported
        // (A load first: the answer rarely changes, and a read-modify-write
        // on every inline read costs more than the load.)
        guard noWait.load(ordering: .relaxed) != answer.rawValue else { return }
        if noWait.exchange(answer.rawValue, ordering: .relaxed) != answer.rawValue, let device {
            NoWaitReads.learn(answer, device: device)
        }
    }
}
