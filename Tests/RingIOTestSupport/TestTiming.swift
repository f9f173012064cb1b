// What both test targets use: a latch, waits with a timeout, sleeps, seeded
// random bytes and the size units.
#if canImport(Glibc)
import Glibc
#endif
import RingIOBase
import RingIOQueue

/// A one-shot latch a test waits on with a timeout.
package final class Latch: Sendable {
    private let group = IOGroup()
    package init(count: Int = 1) { for _ in 0..<count { group.enter() } }
    package func signal() { group.leave() }
    /// Returns false when `timeout` passed first.
    package func wait(timeout: Duration = .seconds(10)) -> Bool { group.wait(timeout: timeout) }
}

package let KiB = 1 << 10
package let MiB = 1 << 20

/// Polls `condition` every millisecond until it holds; false on timeout.
package func waitUntil(timeout: Duration = .seconds(10), _ condition: () -> Bool) -> Bool {
    let parts = timeout.components
    let deadline = monotonicNanoseconds() + UInt64(parts.seconds) * 1_000_000_000
        + UInt64(parts.attoseconds / 1_000_000_000)
    while !condition() {
        if monotonicNanoseconds() >= deadline { return false }
        usleep(1000)
    }
    return true
}

package func sleepNanoseconds(_ ns: UInt64) {
    var request = timespec(tv_sec: Int(ns / 1_000_000_000), tv_nsec: Int(ns % 1_000_000_000))
    var remaining = timespec()
    while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
}

package func milliseconds(_ ms: Int) { sleepNanoseconds(UInt64(ms) * 1_000_000) }

/// Seeded pseudo-random bytes (xorshift64*).
///
/// Whole 8-byte words are stored at once, little-endian (the same bytes as
/// storing them one at a time): tests make tens of MiB of these in debug and
/// sanitizer builds, where a store per byte took seconds per 64 MiB.
package func randomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var x = seed &* 0x9E37_79B9_7F4A_7C15 | 1
    var out = [UInt8](repeating: 0, count: count)
    out.withUnsafeMutableBytes { raw in
        var i = 0
        while i + 8 <= count {
            x ^= x >> 12; x ^= x << 25; x ^= x >> 27
            raw.storeBytes(of: (x &* 0x2545_F491_4F6C_DD1D).littleEndian, toByteOffset: i, as: UInt64.self)
            i += 8
        }
        if i < count {
            x ^= x >> 12; x ^= x << 25; x ^= x >> 27
            var word = (x &* 0x2545_F491_4F6C_DD1D).littleEndian
            withUnsafeBytes(of: &word) { w in
                for j in 0..<(count - i) { raw[i + j] = w[j] }
            }
        }
    }
    return out
}

/// A seeded generator (SplitMix64): the same sequence on every run.
package struct SeededGenerator: RandomNumberGenerator {
    package var state: UInt64
    package init(seed: UInt64) { state = seed }
    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
