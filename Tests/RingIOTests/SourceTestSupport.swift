#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOSources

/// What a source's handlers saw, for the source tests.
final class SourceLog: Sendable {
    let deliveries = Mutex<[UInt]>([])
    let times = Mutex<[ContinuousClock.Instant]>([])
    let cancels = Atomic<Int>(0)
    let registrations = Atomic<Int>(0)
    let overlapping = Atomic<Int>(0)
    let running = Atomic<Int>(0)
    let cancelled = Latch()

    var count: Int { deliveries.withLock { $0.count } }
    var total: UInt { deliveries.withLock { $0.reduce(0, +) } }

    /// Installs handlers that record into this log.
    func attach(_ source: IOSource, onEvent: (@Sendable (UInt) -> Void)? = nil) {
        source.setEventHandler { [self] in
            if running.add(1, ordering: .relaxed).newValue > 1 { overlapping.add(1, ordering: .relaxed) }
            let now = ContinuousClock.now
            let data = source.data
            deliveries.withLock { $0.append(data) }
            times.withLock { $0.append(now) }
            onEvent?(data)
            running.subtract(1, ordering: .relaxed)
        }
        source.setCancelHandler { [self] in
            cancels.add(1, ordering: .relaxed)
            cancelled.signal()
        }
        source.setRegistrationHandler { [self] in
            registrations.add(1, ordering: .relaxed)
        }
    }
}
