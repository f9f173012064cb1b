#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SystemPackage
import Synchronization
import RingIOBase
@_spi(Engine) import RingIOEngine

// The inline first try of a read: `preadv2(..., RWF_NOWAIT)` on the thread
// that submitted it, before any hop.
extension ChannelOperation {
    /// The largest read tried inline. Measured on this machine (6.18, ext4,
    /// cached, under a load average of 14 on 2 cores): one
    /// `preadv2(RWF_NOWAIT)` of 4 KiB takes 1.4 µs (p99 2.4), 64 KiB 4.5 µs
    /// (p99 10), 256 KiB 15 µs (p99 34), 1 MiB 46 µs (p99 24 ms: long enough
    /// to be preempted); a read through the engine and back took 66 µs there.
    /// Up to 256 KiB the copy on the submitting thread costs less than the
    /// hops it saves; larger reads go to the engine in 1 MiB requests,
    /// several in flight.
    static var maxInlineRead: Int { 256 << 10 }

    /// Tries the read `request` (the operation's one request, submitted by
    /// this thread just now, nothing ahead of it on the fd) without waiting:
    /// the bytes the page cache holds, copied on this thread. Returns the
    /// result to complete it with (bytes read, possibly short, or 0 at the
    /// end of the file); `nil`: the request must go to the engine (pages not
    /// cached, `EAGAIN`; a file system without `RWF_NOWAIT`, learned once per
    /// device; any error, which the engine then reports as it always did).
    func tryInline(_ request: IORequest) -> Int32? {
        guard let entry, entry.mayReadInline,
              case .read(let fd, let buffer, let offset) = request.operation,
              buffer.count <= Self.maxInlineRead, offset >= 0 else { return nil }
        #if DEBUG
        // Faults are injected on the engine's way: tests that inject them
        // must see every read go there.
        if engine.faults.hasRules { return nil }
        #endif
        do {
            let n = try Syscall.preadNowait(fd, into: buffer, at: offset)
            entry.learnNoWait(supported: true)
            entry.inlineReads.wrappingAdd(1, ordering: .relaxed)
            return Int32(n)
        } catch {
            entry.inlineReadFailed(error)
            return nil
        }
    }
}
