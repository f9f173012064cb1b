#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import CLiburing
import SystemPackage
import RingIOBase

/// Setting the ring up: the ring thread, the setup flags the kernel takes
/// (best first), the eventfd, the registered tables and the ring's fd.
extension UringBackend {
    /// Creates the ring on a new ring thread and starts its loop.
    ///
    /// - Throws: the `io_uring_setup` error (ENOSYS, EPERM, ENOMEM, ...).
    static func start(entries: Int, spinNanoseconds: UInt64, registerBuffers: Bool,
                      fileSlots: Int, oldKernel: Bool = false) throws(Errno) -> UringBackend {
        // @unchecked: written by the ring thread before `lock.signal`, read
        // by the starter after waking, both under `lock`.
        final class Handoff: @unchecked Sendable {
            let lock = ConditionLock()
            var done = false
            var result: Result<UringBackend, Errno> = .failure(.invalidArgument)
        }
        let handoff = Handoff()
        let entries = UInt32(Swift.min(Swift.max(entries, 2), 32768))
        let rc = spawnThread(name: "ringio-ring") {
            let result = setUp(entries: entries, spinNanoseconds: spinNanoseconds,
                               registerBuffers: registerBuffers, fileSlots: fileSlots, oldKernel: oldKernel)
            let backend = try? result.get()
            handoff.lock.withLock {
                handoff.result = result
                handoff.done = true
                handoff.lock.signal()
            }
            backend?.run()
        }
        if rc != 0 { throw Errno(rawValue: rc) }
        let result = handoff.lock.withLock { () -> Result<UringBackend, Errno> in
            while !handoff.done { handoff.lock.wait() }
            return handoff.result
        }
        return try result.get()
    }

    /// Runs on the ring thread: io_uring_queue_init_params with the best flags the kernel takes.
    fileprivate static func setUp(entries: UInt32, spinNanoseconds: UInt64, registerBuffers: Bool,
                              fileSlots: Int, oldKernel: Bool) -> Result<UringBackend, Errno> {
        let ring = UnsafeMutablePointer<io_uring>.allocate(capacity: 1)
        // TASKRUN_FLAG: the kernel flags held completions in the SQ ring, so
        // the ring thread can poll for them without a system call (see
        // `pollsBeforeWaiting`); each setup is tried without it too.
        let flag = cliburing_setup_taskrun_flag()
        var attempts: [(UInt32, String)] = [
            (cliburing_setup_single_issuer() | cliburing_setup_defer_taskrun() | flag, "SINGLE_ISSUER|DEFER_TASKRUN|TASKRUN_FLAG"),
            (cliburing_setup_single_issuer() | cliburing_setup_defer_taskrun(), "SINGLE_ISSUER|DEFER_TASKRUN"),
            (cliburing_setup_coop_taskrun() | flag, "COOP_TASKRUN|TASKRUN_FLAG"),
            (cliburing_setup_coop_taskrun(), "COOP_TASKRUN"),
            (0, "plain"),
        ]
        // For measuring the setups against each other (Benchmarks, item 2 of
        // issue 26): RINGIO_RING_SETUP=coop or plain starts from that one.
        let tuning = RingTuning.fromEnvironment
        // (`skipSetups` counts kinds of setup: coop starts at the third, plain at the fifth.)
        attempts.removeFirst([0, 2, 4][tuning.skipSetups])
        var lastError: Int32 = ENOSYS
        for (flags, name) in attempts {
            var params = io_uring_params()
            params.flags = flags | cliburing_setup_cqsize()
            params.cq_entries = entries * 2
            let rc = io_uring_queue_init_params(entries, ring, &params)
            if rc == 0 {
                let efd: Int32
                do throws(Errno) { efd = try Syscall.eventfd(flags: Int32(EFD_CLOEXEC)) } catch {
                    io_uring_queue_exit(ring)
                    ring.deallocate()
                    return .failure(error)
                }
                let tables = RingTables(ring: ring, buffers: registerBuffers, files: fileSlots)
                // The ring's fd in the task's registered-ring table: each
                // io_uring_enter then skips the fd lookup (fdget/fdput), as
                // fio and t/io_uring do. Only the ring thread enters this ring.
                var description = name
                if tuning.registerRingFD && io_uring_register_ring_fd(ring) == 1 { description += ", registered ring fd" }
                return .success(UringBackend(ring: ring, eventFD: efd, description: description,
                                             spinNanoseconds: spinNanoseconds, tables: tables,
                                             oldKernel: oldKernel,
                                             taskrunFlag: flags & flag != 0 && tuning.pollsBeforeWaiting))
            }
            lastError = -rc
            // Only an unknown flag (EINVAL) is worth another attempt.
            if lastError != EINVAL { break }
        }
        ring.deallocate()
        return .failure(Errno(rawValue: lastError))
    }
}

/// The ring setup asked for in the environment, for benchmarks:
/// `RINGIO_RING_SETUP` (`coop`: start from COOP_TASKRUN; `plain`: no flags)
/// `RINGIO_RING_FD=0` (leave the ring's fd unregistered) and `RINGIO_RING_POLL=0`
/// (no poll for completions before a wait). Unset: the
/// best setup the kernel takes, with the ring's fd registered.
struct RingTuning {
    var skipSetups = 0
    var registerRingFD = true
    /// `RINGIO_RING_POLL=0`: the ring thread never polls the TASKRUN flag
    /// before a wait (see `UringBackend.pollForCompletion`).
    var pollsBeforeWaiting = true

    static var fromEnvironment: RingTuning {
        var tuning = RingTuning()
        if let value = getenv("RINGIO_RING_SETUP").map({ String(cString: $0) }) {
            tuning.skipSetups = value == "coop" ? 1 : value == "plain" ? 2 : 0
        }
        if let value = getenv("RINGIO_RING_FD"), String(cString: value) == "0" { tuning.registerRingFD = false }
        if let value = getenv("RINGIO_RING_POLL"), String(cString: value) == "0" { tuning.pollsBeforeWaiting = false }
        return tuning
    }
}
