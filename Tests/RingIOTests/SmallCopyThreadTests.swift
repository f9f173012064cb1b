#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOCopy
@testable import RingIOFiles
@testable import RingIOBase

/// A task executor whose jobs one thread runs (as ringcp's main thread does),
/// with blocking calls allowed there; it counts the jobs it ran.
private final class OneThreadExecutor: TaskExecutor {
    private let jobs = Locked<[UnownedJob]>([])
    let jobsRun = Atomic<Int>(0)
    let finished = Atomic<Bool>(false)

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        jobs.withLock { $0.append(job) }
    }

    /// Runs the jobs on a thread of its own until `finished`.
    func start() {
        _ = spawnThread(name: "one-thread-executor") { [self] in
            while !finished.load(ordering: .acquiring) {
                let taken = jobs.withLock { j -> [UnownedJob] in
                    defer { j.removeAll() }
                    return j
                }
                if taken.isEmpty {
                    usleep(200)
                    continue
                }
                BlockingCalls.allowed {
                    for job in taken {
                        jobsRun.add(1, ordering: .relaxed)
                        job.runSynchronously(on: asUnownedTaskExecutor())
                    }
                }
            }
        }
    }
}

@Suite("The small copy's thread")
struct SmallCopyThreadTests {
    @Test("a small copy on a thread that allows blocking calls runs there, with no hand-off: the task is one job",
          arguments: allBackends, [0, 4096, IO.smallFileLimit])
    func inlineWhereBlockingIsAllowed(backend: IOEngine.Backend, size: Int) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("src"), randomBytes(size, seed: 21))
        try writeFile(dir.file("old"), randomBytes(10, seed: 22))
        let executor = OneThreadExecutor()
        executor.start()
        defer { executor.finished.store(true, ordering: .releasing) }
        let (source, destination, old) = (FilePath(dir.file("src")), FilePath(dir.file("dst")), FilePath(dir.file("old")))
        let outcomes = try await Task(executorPreference: executor) { () async throws -> [FileCopier.Outcome] in
            // A new file, then an existing one replaced atomically.
            [try await FileCopier(engine: engine).copy(from: source, to: destination),
             try await FileCopier(engine: engine).copy(from: source, to: old)]
        }.value
        #expect(outcomes.map(\.bytes) == [Int64(size), Int64(size)])
        #expect(outcomes.map(\.replace) == [.atomic, .atomic])
        #expect(executor.jobsRun.load(ordering: .relaxed) == 1, "the copies suspended the task")
        #expect(try readFile(dir.file("dst")) == randomBytes(size, seed: 21))
        #expect(try readFile(dir.file("old")) == randomBytes(size, seed: 21))
        #expect(CopyFileTests.leftovers(dir.path, keeping: ["src", "dst", "old"]) == [])
    }

    @Test("a small copy from a task on IOQueue.global runs on its worker and resumes there, on the same thread",
          arguments: allBackends)
    func inlineOnGlobalWorker(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("src"), randomBytes(4096, seed: 23))
        let (source, destination) = (FilePath(dir.file("src")), FilePath(dir.file("dst")))
        let sameThread = try await Task(executorPreference: IOQueue.global) { () async throws -> Bool in
            let before = pthread_self()
            try await FileCopier(engine: engine).copy(from: source, to: destination)
            return pthread_equal(before, pthread_self()) != 0 && IOQueue.global.isCurrent
        }.value
        #expect(sameThread)
        #expect(try readFile(dir.file("dst")) == randomBytes(4096, seed: 23))
    }
}
