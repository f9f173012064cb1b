import RingIOBase

#if DEBUG
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Debug builds only: makes an engine fail or shorten the requests that match
/// a rule, for tests of faults the kernel will not give on demand (EIO, EINTR
/// and EAGAIN storms, 1-byte reads and writes). Release builds have neither
/// this type nor the check in `IOEngine.submit`.
///
/// A matching request is replaced, on its way to the backend, by one that
/// does the fault: a NOP that completes with `-errno` (so nothing was
/// transferred, as the real error would mean), or the same read or write cut
/// to its first byte. The original's completion gets the result and its owner
/// lives until then; `IOEngine.cancel` on the original cancels the stand-in.
package final class FaultInjector: Sendable {
    /// Which requests a rule applies to.
    enum Target: Sendable, Equatable {
        case reads, writes
        /// Readiness watches (`.poll`, `.pollMultishot`): only `.fail`
        /// applies (the watch ends with the error).
        case polls
    }

    /// What happens to a matching request.
    enum Fault: Sendable, Equatable {
        /// Completes with `-errno` without reaching the file.
        case fail(Int32)
        /// Moves at most one byte.
        case shorten
        /// Writes: moves at most this many bytes (of a `pwritev`, those of
        /// its first regions), as a disk that fills up in the middle does.
        case shortenWrite(to: Int)
    }

    struct Rule: Sendable {
        var target: Target
        /// `nil`: any fd.
        var fd: Int32?
        var fault: Fault
        /// Matching requests to let through before the first fault.
        var skip: Int = 0
        /// Faults to inject in all; then the rule is spent.
        var times: Int = .max
        /// Inject on one matching request in `every` (after `skip`).
        var every: Int = 1
    }

    private struct State {
        var rules: [(rule: Rule, seen: Int, injected: Int)] = []
        /// Originals that went out as a stand-in, for `cancel`.
        var standIns: [ObjectIdentifier: IORequest] = [:]
        var injectedCount = 0
    }

    private let state = Locked(State())

    /// Adds a rule; rules are tried in the order they were added.
    func add(_ rule: Rule) {
        state.withLock { $0.rules.append((rule, 0, 0)) }
    }

    /// Removes every rule (stand-ins already submitted still complete).
    func removeAll() {
        state.withLock { $0.rules.removeAll() }
    }

    /// Whether any rule is set (requests that bypass the engine, such as
    /// inline reads, then go through it).
    package var hasRules: Bool { state.withLock { !$0.rules.isEmpty } }

    /// How many requests were faulted so far.
    var injected: Int { state.withLock { $0.injectedCount } }

    /// The request to hand to the backend in place of `request`.
    func apply(to request: IORequest) -> IORequest {
        state.withLock { s -> IORequest in
            guard !s.rules.isEmpty, let (target, fd) = Self.classify(request.operation) else { return request }
            for i in s.rules.indices {
                let rule = s.rules[i].rule
                guard rule.target == target, rule.fd == nil || rule.fd == fd, s.rules[i].injected < rule.times else {
                    continue
                }
                s.rules[i].seen += 1
                let n = s.rules[i].seen - 1 - rule.skip
                guard n >= 0, n % Swift.max(rule.every, 1) == 0 else { continue }
                guard let standIn = makeStandIn(for: request, fault: rule.fault) else { continue }
                s.rules[i].injected += 1
                s.injectedCount += 1
                s.standIns[ObjectIdentifier(request)] = standIn
                return standIn
            }
            return request
        }
    }

    /// The stand-in of `request`, if it went out as one.
    func standIn(for request: IORequest) -> IORequest? {
        state.withLock { $0.standIns[ObjectIdentifier(request)] }
    }

    private static func classify(_ operation: IORequest.Operation) -> (Target, Int32)? {
        switch operation {
        case .read(let fd, _, _), .readv(let fd, _, _, _): return (.reads, fd)
        case .write(let fd, _, _), .writev(let fd, _, _, _): return (.writes, fd)
        case .poll(let fd, _), .pollMultishot(let fd, _): return (.polls, fd)
        default: return nil
        }
    }

    /// Keeps the original (and so its owner) and a one-entry iovec alive.
    private final class Hold: @unchecked Sendable {
        // @unchecked: immutable after init; `iovec` is read only by the one
        // request that carries it.
        let original: IORequest
        let iovec: UnsafeMutablePointer<iovec>?
        init(_ original: IORequest, iovec: UnsafeMutablePointer<iovec>?) {
            self.original = original
            self.iovec = iovec
        }
        deinit { iovec?.deallocate() }
    }

    private func makeStandIn(for request: IORequest, fault: Fault) -> IORequest? {
        let operation: IORequest.Operation
        var single: UnsafeMutablePointer<iovec>?
        switch (fault, request.operation) {
        case (.fail, _):
            operation = .nop
        case (.shorten, .read(let fd, let buffer, let offset)):
            guard buffer.count > 1 else { return nil }
            operation = .read(fd: fd, buffer: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<1]), offset: offset)
        case (.shorten, .write(let fd, let buffer, let offset)):
            guard buffer.count > 1 else { return nil }
            operation = .write(fd: fd, buffer: UnsafeRawBufferPointer(rebasing: buffer[0..<1]), offset: offset)
        case (.shorten, .readv(let fd, let iovecs, let count, let offset)),
             (.shorten, .writev(let fd, let iovecs, let count, let offset)):
            guard count > 0, iovecs[0].iov_len > 1 else { return nil }
            single = .allocate(capacity: 1)
            single!.initialize(to: iovec(iov_base: iovecs[0].iov_base, iov_len: 1))
            let isRead = if case .readv = request.operation { true } else { false }
            operation = isRead ? .readv(fd: fd, iovecs: single!, count: 1, offset: offset)
                : .writev(fd: fd, iovecs: single!, count: 1, offset: offset)
        case (.shortenWrite(let limit), .write(let fd, let buffer, let offset)):
            guard buffer.count > limit, limit > 0 else { return nil }
            operation = .write(fd: fd, buffer: UnsafeRawBufferPointer(rebasing: buffer[0..<limit]), offset: offset)
        case (.shortenWrite(let limit), .writev(let fd, let iovecs, let count, let offset)):
            let total = (0..<count).reduce(0) { $0 + iovecs[$1].iov_len }
            guard total > limit, limit > 0 else { return nil }
            single = .allocate(capacity: count)
            var left = limit, n = 0
            while left > 0 {
                let length = Swift.min(left, iovecs[n].iov_len)
                (single! + n).initialize(to: iovec(iov_base: iovecs[n].iov_base, iov_len: length))
                left -= length
                n += 1
            }
            operation = .writev(fd: fd, iovecs: single!, count: n, offset: offset)
        default:
            return nil
        }
        let result: Int32? = if case .fail(let e) = fault { -e } else { nil }
        let hold = Hold(request, iovec: single)
        return IORequest(operation, owner: hold, mayBlock: request.mayBlock) { [self] res in
            state.withLock { _ = $0.standIns.removeValue(forKey: ObjectIdentifier(hold.original)) }
            // A stand-in that was cancelled reports the cancel, not the fault.
            hold.original.complete(res == -ECANCELED ? res : (result ?? res))
        }
    }
}
#endif
