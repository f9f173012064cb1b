#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import RingIO
import SystemPackage

/// `--verify`: both files read again through channels, chunk by chunk, and
/// compared. (What comes back is what the kernel has, most likely from its
/// page cache, not a re-read of the disk.)
enum Verify {
    enum Outcome: Equatable {
        case same
        case differentSize(Int64, Int64)
        case differentAt(Int64)
    }

    static func compare(_ first: FilePath, _ second: FilePath) async throws(Errno) -> Outcome {
        let a = FS.open(first, O_RDONLY | O_CLOEXEC), b = FS.open(second, O_RDONLY | O_CLOEXEC)
        defer {
            if a >= 0 { close(a) }
            if b >= 0 { close(b) }
        }
        if a < 0 || b < 0 { throw Errno(rawValue: errno) }
        var sa = stat(), sb = stat()
        fstat(a, &sa)
        fstat(b, &sb)
        if sa.st_size != sb.st_size { return .differentSize(Int64(sa.st_size), Int64(sb.st_size)) }
        let queue = IOQueue(label: "ringcp.verify")
        let closed = IOGroup()
        closed.enter()
        closed.enter()
        let left = IOChannel(kind: .random, fileDescriptor: FileDescriptor(rawValue: a), queue: queue) { _ in closed.leave() }
        let right = IOChannel(kind: .random, fileDescriptor: FileDescriptor(rawValue: b), queue: queue) { _ in closed.leave() }
        let outcome: Result<Outcome, Errno>
        do throws(Errno) {
            outcome = .success(try await compare(left, right))
        } catch {
            outcome = .failure(error)
        }
        left.close(stop: true)
        right.close(stop: true)
        await closed.wait()  // the fds are closed only after both channels let go of them
        return try outcome.get()
    }

    private static func compare(_ left: IOChannel, _ right: IOChannel) async throws(Errno) -> Outcome {
        var iteratorA = left.chunks().makeAsyncIterator()
        var iteratorB = right.chunks().makeAsyncIterator()
        var pendingA = DataChunk.empty, pendingB = DataChunk.empty
        var offset: Int64 = 0
        while true {
            do throws(Errno) {
                if pendingA.isEmpty, let next = try await iteratorA.next() { pendingA = next }
                if pendingB.isEmpty, let next = try await iteratorB.next() { pendingB = next }
            } catch {
                throw error
            }
            let n = min(pendingA.count, pendingB.count)
            if n == 0 {
                return pendingA.count == pendingB.count ? .same : .differentAt(offset)
            }
            let x = pendingA.subrange(0..<n), y = pendingB.subrange(0..<n)
            if let at = firstDifference(x, y) { return .differentAt(offset + Int64(at)) }
            pendingA = pendingA.subrange(n..<pendingA.count)
            pendingB = pendingB.subrange(n..<pendingB.count)
            offset += Int64(n)
        }
    }

    /// The first index where two chunks of the same length differ.
    static func firstDifference(_ x: DataChunk, _ y: DataChunk) -> Int? {
        if x == y { return nil }
        var index = 0
        for (p, q) in zip(x, y) {
            if p != q { return index }
            index += 1
        }
        return nil
    }
}
