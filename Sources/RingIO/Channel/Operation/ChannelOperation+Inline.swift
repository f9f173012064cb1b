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
    /// The largest read tried inline. Bytes in the page cache copy at
    /// 10–20 GiB/s: 256 KiB holds the submitting thread for about 20 µs,
    /// less than the two thread hops it saves cost beside two busy threads
    /// (Benchmarks/results/natural-path.md). Larger reads go to the engine
    /// in 1 MiB requests, several in flight.
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
            entry.inlineReads.add(1, ordering: .relaxed)
            return Int32(n)
        } catch {
            if error.rawValue == EOPNOTSUPP {
                entry.learnNoWait(supported: false)
            } else if error == .resourceTemporarilyUnavailable {
                entry.learnNoWait(supported: true)
            }
            entry.inlineFallbacks.add(1, ordering: .relaxed)
            return nil
        }
    }
}
