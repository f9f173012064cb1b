#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIOBase

/// The conventions of the system-call seam (`Syscall`): `EINTR` retried,
/// `errno` mapped to `Errno`, the debug mock reaching the named call only.
/// Pipes only (no file system). Each injection is scoped to the calling
/// thread and each test is synchronous, so tests running in parallel never
/// take each other's faults.
@Suite("Syscall seam")
struct SyscallTests {
    /// A pipe with `bytes` in it; both ends closed after `body`.
    static func withPipe<T>(holding bytes: [UInt8] = [], _ body: (CInt, CInt) throws -> T) throws -> T {
        let pipe = try Syscall.pipe(capacity: 65536)
        defer {
            Syscall.closeIgnoringErrors(pipe.read)
            Syscall.closeIgnoringErrors(pipe.write)
        }
        if !bytes.isEmpty {
            let n = try bytes.withUnsafeBytes { try Syscall.write(pipe.write, from: $0) }
            #expect(n == bytes.count)
        }
        return try body(pipe.read, pipe.write)
    }

    #if DEBUG
    @Test("EINTR is retried: two injected interruptions, then the real read returns the byte")
    func interruptedCallIsRetried() throws {
        try Self.withPipe(holding: [42]) { readEnd, _ in
            let eintr = Syscall.Mock.inject(.read, errno: .interrupted, times: 2, scope: .callingThread)
            defer { eintr.remove() }
            var byte: UInt8 = 0
            let n = try withUnsafeMutableBytes(of: &byte) { try Syscall.read(readEnd, into: $0) }
            #expect(n == 1 && byte == 42)
            #expect(eintr.fired == 2 && eintr.remaining == 0)
        }
    }

    @Test("close is never retried: an EINTR from close is success (Linux released the fd)")
    func closeIsNotRetried() throws {
        let pipe = try Syscall.pipe(capacity: 4096)
        defer { Syscall.closeIgnoringErrors(pipe.write) }
        let eintr = Syscall.Mock.inject(.close, errno: .interrupted, times: 1, scope: .callingThread)
        defer { eintr.remove() }
        // The injected EINTR stands in for a close that released the fd (Linux does).
        try Syscall.close(pipe.read)
        #expect(eintr.fired == 1 && eintr.remaining == 0)
        // The injected EINTR made no call: the real close, once. (Not closed
        // a third time: a parallel test may have been given the number.)
        try Syscall.close(pipe.read)
    }

    @Test("an injected fault reaches the named call only, on the injecting thread only, as often as asked")
    func injectionReachesTheNamedCallOnly() throws {
        try Self.withPipe { readEnd, writeEnd in
            let enospc = Syscall.Mock.inject(.write, errno: .noSpace, times: 1, scope: .callingThread)
            defer { enospc.remove() }
            let byte: [UInt8] = [7]
            // Another call (pwrite, fcntl) is not failed by it: pwrite on a pipe gets its real ESPIPE.
            #expect(throws: Errno.illegalSeek) { try byte.withUnsafeBytes { try Syscall.pwrite(writeEnd, from: $0, at: 0) } }
            let flags = try Syscall.fcntl(writeEnd, F_GETFL)
            #expect(flags >= 0)
            // Another thread's write is not failed by it.
            let other = Locked<Int?>(nil)
            let done = Latch()
            #expect(spawnThread(name: "syscall-test") {
                other.withLock { $0 = try? byte.withUnsafeBytes { try Syscall.write(writeEnd, from: $0) } }
                done.signal()
            } == 0)
            #expect(done.wait())
            #expect(other.withLock { $0 } == 1)
            #expect(enospc.fired == 0)
            // This thread's write is, once.
            #expect(throws: Errno.noSpace) { try byte.withUnsafeBytes { try Syscall.write(writeEnd, from: $0) } }
            let wrote = try byte.withUnsafeBytes { try Syscall.write(writeEnd, from: $0) }
            #expect(wrote == 1)
            #expect(enospc.fired == 1 && enospc.remaining == 0)
            var two = [UInt8](repeating: 0, count: 2)
            let read = try two.withUnsafeMutableBytes { try Syscall.read(readEnd, into: $0) }
            #expect(read == 2)
        }
    }

    @Test("an injection withdrawn with remove() fails nothing more")
    func removedInjectionIsInert() throws {
        try Self.withPipe { _, writeEnd in
            let injection = Syscall.Mock.inject(.fcntl, errno: .ioError, times: 5, scope: .callingThread)
            injection.remove()
            let flags = try Syscall.fcntl(writeEnd, F_GETFL)
            #expect(flags >= 0)
            #expect(injection.fired == 0 && injection.remaining == 0)
        }
    }
    #endif

    @Test("errno becomes the Errno the call failed with (EBADF, ESPIPE, ENOENT, EEXIST)")
    func errnoIsMapped() throws {
        #expect(throws: Errno.badFileDescriptor) { try Syscall.fstat(-1) }
        #expect(throws: Errno.badFileDescriptor) { try Syscall.close(-1) }
        let missing = FilePath("/nonexistent-ringio-\(Syscall.getpid())/x")
        #expect(throws: Errno.noSuchFileOrDirectory) { try Syscall.stat(missing) }
        #expect(throws: Errno.noSuchFileOrDirectory) { try Syscall.open(missing, flags: O_RDONLY | O_CLOEXEC) }
        try Self.withPipe { readEnd, _ in
            #expect(throws: Errno.illegalSeek) { try Syscall.lseek(readEnd, 0, SEEK_CUR) }
            let status = try Syscall.fstat(readEnd)
            #expect(status.type == .fifo)
        }
        #expect(throws: Errno.fileExists) { try Syscall.mkdirat(AT_FDCWD, "/", permissions: .ownerReadWriteExecute) }
    }

    @Test("the mock is compiled into debug builds only: a release build calls straight through")
    func mockIsDebugOnly() throws {
        try Self.withPipe { _, writeEnd in
            #if DEBUG
            // Debug: the seam consults the mock before each call.
            let injection = Syscall.Mock.inject(.fcntl, errno: .ioError, times: 1, scope: .callingThread)
            defer { injection.remove() }
            #expect(throws: Errno.ioError) { try Syscall.fcntl(writeEnd, F_GETFL) }
            #else
            // Release: `Syscall.Mock` does not exist (this branch could not
            // name it), and the call is the real one.
            let flags = try Syscall.fcntl(writeEnd, F_GETFL)
            #expect(flags >= 0)
            #endif
        }
    }
}
