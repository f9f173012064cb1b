import SystemPackage
import Testing
import RingIOChannel
import RingIOCopy

/// `CopyPlan` with no kernel: which steps a copy tries, in which order, and
/// when a failed step gives way to the next.
@Suite("CopyPlan")
struct CopyPlanTests {
    typealias Step = CopyPlan.Step
    static let large: Int64 = 8 << 20
    static let small = Int64(IO.smallFileLimit)

    func plan(_ source: FileKind = .regular, _ destination: FileKind = .regular, _ fileSystem: CopyPlan.FileSystem = .other,
              size: Int64 = large, _ request: CopyPlan.Request = .init()) -> CopyPlan {
        let plan = CopyPlan(source: source, destination: destination, fileSystem: fileSystem, size: size, request: request)
        plan._invariantCheck()
        return plan
    }

    /// Two large regular files on another file system than ext4.
    func plan(_ request: CopyPlan.Request) -> CopyPlan { plan(.regular, .regular, .other, size: Self.large, request) }

    @Test("a FIFO, a device or a socket on either side streams, whatever was asked")
    func streams() {
        for (source, destination) in [(FileKind.fifo, FileKind.regular), (.regular, .fifo), (.characterSpecial, .regular),
                                      (.regular, .blockSpecial), (.socket, .regular)] {
            for request in [CopyPlan.Request(), .init(strategy: .splice), .init(reflink: .always), .init(directIO: true)] {
                #expect(plan(source, destination, size: 0, request).steps == [.stream])
                #expect(plan(source, destination, .ext4, request).steps == [.stream])
            }
        }
    }

    @Test("a regular file up to the small-file limit is copied whole, unless a request needs another step")
    func smallFiles() {
        for size in [0, 1, 4096, Self.small] {
            #expect(plan(size: size).steps == [.wholeFile])
            #expect(plan(.regular, .regular, .ext4, size: size).steps == [.wholeFile])
            #expect(plan(size: size, .init(strategy: .chain)).steps == [.wholeFile])
            #expect(plan(size: size, .init(reflink: .auto)).steps == [.wholeFile], "reflink .auto copies small files")
            #expect(CopyPlan.copiesWhole(size: size, request: .init()))
        }
        #expect(plan(size: Self.small + 1).steps == [.copyFileRange, .ringSplice, .channels])
        #expect(plan(size: 4096, .init(strategy: .copyFileRange)).steps == [.copyFileRange, .ringSplice, .channels])
        #expect(plan(size: 4096, .init(strategy: .splice)).steps == [.ringSplice, .channels])
        #expect(plan(size: 4096, .init(reflink: .always)).steps == [.reflink])
        #expect(plan(size: 4096, .init(sparse: .always)).steps == [.channels])
        #expect(plan(size: 4096, .init(directIO: true)).steps == [.channels])
    }

    @Test("a large file: copy_file_range, then ring splices, then channels; onto ext4 preallocated, the one-pipe splice first")
    func largeFiles() {
        let plain = plan()
        #expect(plain.steps == [.copyFileRange, .ringSplice, .channels])
        #expect(!plain.preallocate)
        #expect(plain.sizesDestination)
        let ext4 = plan(.regular, .regular, .ext4)
        #expect(ext4.steps == [.preallocatedSplice, .copyFileRange, .ringSplice, .channels])
        #expect(ext4.preallocate)
        // Asked for copy_file_range: on ext4 still preallocated, but no splice first.
        let asked = plan(.regular, .regular, .ext4, .init(strategy: .copyFileRange))
        #expect(asked.steps == [.copyFileRange, .ringSplice, .channels])
        #expect(asked.preallocate)
        // Splices and channels never preallocate (neither is a kernel copy that gains).
        #expect(!plan(.regular, .regular, .ext4, .init(strategy: .splice)).preallocate)
        #expect(plan(.regular, .regular, .ext4, .init(strategy: .channels)).steps == [.channels])
        #expect(plan(.regular, .regular, .ext4, .init(sparse: .always)).steps == [.channels])
        #expect(plan(.regular, .regular, .ext4, .init(directIO: true)).steps == [.channels])
        #expect(plan(.regular, .regular, .ext4, .init(sparse: .never)).steps == ext4.steps, "sparse .never chooses the regions, not the steps")
    }

    @Test("reflink: .always is the only step; .auto and strategy .reflink try it first, then copy")
    func reflinks() {
        let always = plan(.regular, .regular, .ext4, .init(reflink: .always))
        #expect(always.steps == [.reflink])
        #expect(!always.sizesDestination)
        #expect(!always.fallsThrough(from: .reflink, errno: .notSupported, moved: 0), "required: its failure is the copy's")
        let auto = plan(.init(reflink: .auto))
        #expect(auto.steps == [.reflink, .copyFileRange, .ringSplice, .channels])
        #expect(plan(.init(strategy: .reflink)).steps == auto.steps)
        #expect(plan(.init(reflink: .auto, directIO: true)).steps == [.reflink, .channels])
        // Any error of a reflink that was not required gives way (EXDEV, EOPNOTSUPP, ENOTTY, even EIO).
        for errno in [Errno.improperLink, .notSupported, .inappropriateIOCTLForDevice, .invalidArgument, .ioError] {
            #expect(auto.fallsThrough(from: .reflink, errno: errno, moved: 0), "\(errno)")
        }
    }

    @Test("a step gives way only when it moved nothing and the errno says it cannot copy these files")
    func fallingThrough() {
        let ext4 = plan(.regular, .regular, .ext4)
        for step in [Step.preallocatedSplice, .copyFileRange, .ringSplice] {
            for errno in [Errno.improperLink, .invalidArgument, .notSupported, .noFunction] {
                #expect(ext4.fallsThrough(from: step, errno: errno, moved: 0), "\(step) \(errno)")
                #expect(!ext4.fallsThrough(from: step, errno: errno, moved: 4096), "\(step) \(errno) after bytes moved")
            }
            // A failure of the copy itself: the disk, the quota, a bad file, a cancellation.
            for errno in [Errno.noSpace, .diskQuotaExceeded, .ioError, .badFileDescriptor, .canceled, .permissionDenied] {
                #expect(!ext4.fallsThrough(from: step, errno: errno, moved: 0), "\(step) \(errno)")
            }
        }
        // No pipe to be had: the steps that need pipes give way; copy_file_range needs none.
        #expect(ext4.fallsThrough(from: .preallocatedSplice, errno: .tooManyOpenFiles, moved: 0))
        #expect(ext4.fallsThrough(from: .ringSplice, errno: .tooManyOpenFilesInSystem, moved: 0))
        #expect(!ext4.fallsThrough(from: .copyFileRange, errno: .tooManyOpenFiles, moved: 0))
        // The last step, and a step the plan does not hold, never give way.
        #expect(!ext4.fallsThrough(from: .channels, errno: .invalidArgument, moved: 0))
        #expect(!plan(.init(strategy: .splice)).fallsThrough(from: .copyFileRange, errno: .invalidArgument, moved: 0))
        #expect(!plan(.fifo, .regular).fallsThrough(from: .stream, errno: .invalidArgument, moved: 0))
    }

    @Test("every request and kind keeps the invariants; each step names the strategy an outcome reports")
    func everyPlan() {
        let kinds: [FileKind] = [.regular, .fifo, .characterSpecial]
        let strategies: [FileCopier.Strategy] = [.automatic, .chain, .copyFileRange, .splice, .channels, .stream, .reflink]
        var seen = Set<Step>()
        for source in kinds {
            for destination in kinds {
                for fileSystem in [CopyPlan.FileSystem.ext4, .other] {
                    for size in [0, Self.small, Self.large] {
                        for strategy in strategies {
                            for reflink in [FileCopier.Reflink.never, .auto, .always] {
                                for sparse in [FileCopier.Sparse.auto, .never, .always] {
                                    for directIO in [false, true] {
                                        let request = CopyPlan.Request(strategy: strategy, reflink: reflink, sparse: sparse,
                                                                       directIO: directIO)
                                        let made = plan(source, destination, fileSystem, size: size, request)
                                        seen.formUnion(made.steps)
                                        // A copy that may be left with no step fails clearly: the last never gives way.
                                        #expect(!made.fallsThrough(from: made.steps.last!, errno: .invalidArgument, moved: 0))
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        #expect(seen == Set(Step.allCases), "every step is reachable: \(Set(Step.allCases).subtracting(seen))")
        #expect(Step.wholeFile.strategy == .chain && Step.preallocatedSplice.strategy == .splice
                && Step.ringSplice.strategy == .splice && Step.copyFileRange.strategy == .copyFileRange
                && Step.reflink.strategy == .reflink && Step.channels.strategy == .channels && Step.stream.strategy == .stream)
    }
}
