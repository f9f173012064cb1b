import SystemPackage
import RingIOBase
import RingIOChannel

/// Which ways a copy's bytes may move, in the order to try them: a pure
/// value, from what is known once both files are open (their kinds, the
/// destination's file system, the size) and what the copier asks. No
/// system call: `Tests/RingIOUnitTests/CopyPlanTests.swift` checks every
/// rule without a kernel. `FileCopier` runs the steps in order (one loop,
/// `FileCopier+Bytes.swift`): a step that cannot copy these files, and
/// moved nothing, gives way to the next (`fallsThrough`); any other
/// failure is the copy's.
///
/// ```
///  a FIFO, a device or a socket on either side      stream
///  a small regular file (≤ IO.smallFileLimit)       wholeFile
///  reflink .always                                  reflink (its failure is the copy's)
///  reflink .auto, strategy .reflink                 reflink, then as below
///  directIO, sparse .always, strategy .channels     channels
///  strategy .splice                                 ringSplice, channels
///  onto ext4 (automatic)                            preallocatedSplice, copyFileRange, ringSplice, channels
///  otherwise                                        copyFileRange, ringSplice, channels
/// ```
package struct CopyPlan: Sendable, Hashable {
    /// One way to move the bytes.
    package enum Step: String, Sendable, Hashable, CaseIterable {
        /// The whole file read into one buffer and written, by plain calls
        /// on one thread (`SmallFileCopy.swift`).
        case wholeFile
        /// The destination shares the source's blocks (`FICLONE`).
        case reflink
        /// ext4: the data's blocks allocated first, then spliced through
        /// one 1 MiB pipe by blocking calls (`IO.spliceFileRanges`).
        case preallocatedSplice
        /// `copy_file_range(2)`, one 64 MiB call at a time (`IO.copyFileRange`).
        case copyFileRange
        /// Four lanes of linked splices through pipes on the ring (`IO.copyRanges`).
        case ringSplice
        /// Two random channels: reads at offsets, writes at the same offsets.
        case channels
        /// Two stream channels, as the bytes come (a FIFO, a device, a socket).
        case stream

        /// What `FileCopier.Outcome.strategy` calls it.
        package var strategy: FileCopier.Strategy {
            switch self {
            case .wholeFile: .chain
            case .reflink: .reflink
            case .preallocatedSplice, .ringSplice: .splice
            case .copyFileRange: .copyFileRange
            case .channels: .channels
            case .stream: .stream
            }
        }

        /// The step needs pipes (their creation may fail with `EMFILE`).
        var usesPipes: Bool { self == .preallocatedSplice || self == .ringSplice }
    }

    /// What the destination's file system is, as far as the plan cares.
    package enum FileSystem: Sendable, Hashable {
        /// ext2/3/4 (`EXT4_SUPER_MAGIC`): `copy_file_range` is a splice
        /// through a 64 KiB pipe there, and blocks allocated up front pay.
        case ext4
        /// Anything else, or not known.
        case other
    }

    /// What the copier asks (`FileCopier`'s knobs that choose the steps).
    package struct Request: Sendable, Hashable {
        package var strategy: FileCopier.Strategy
        package var reflink: FileCopier.Reflink
        package var sparse: FileCopier.Sparse
        package var directIO: Bool

        package init(strategy: FileCopier.Strategy = .automatic, reflink: FileCopier.Reflink = .never,
                     sparse: FileCopier.Sparse = .auto, directIO: Bool = false) {
            self.strategy = strategy
            self.reflink = reflink
            self.sparse = sparse
            self.directIO = directIO
        }
    }

    /// The steps, in the order to try them; never empty.
    package private(set) var steps: [Step]
    /// The destination's blocks are allocated (`fallocate`) before the
    /// first kernel copy (ext4, where it halves the cost of the writes).
    package private(set) var preallocate: Bool
    /// The destination is sized to the source (`ftruncate`) and the data
    /// regions found before the first step that moves bytes at offsets.
    package var sizesDestination: Bool { steps.contains { $0 != .stream && $0 != .wholeFile && $0 != .reflink } }

    /// - Parameters:
    ///   - source: the source's kind.
    ///   - destination: the opened destination's kind.
    ///   - fileSystem: the destination's file system.
    ///   - size: the source's size by its stat.
    ///   - request: what the copier asks.
    package init(source: FileKind, destination: FileKind, fileSystem: FileSystem, size: Int64, request: Request) {
        preallocate = false
        if source != .regular || destination != .regular {
            steps = [.stream]
            return
        }
        if Self.copiesWhole(size: size, request: request) {
            steps = [.wholeFile]
            return
        }
        var steps: [Step] = []
        if request.reflink == .always {
            self.steps = [.reflink]
            return
        }
        if request.reflink == .auto || request.strategy == .reflink { steps.append(.reflink) }
        if request.directIO || request.sparse == .always || request.strategy == .channels {
            steps.append(.channels)
        } else if request.strategy == .splice {
            steps += [.ringSplice, .channels]
        } else {
            if fileSystem == .ext4 {
                preallocate = true
                // ext4's copy_file_range splices through 64 KiB; this, through 1 MiB.
                if request.strategy == .automatic || request.strategy == .chain { steps.append(.preallocatedSplice) }
            }
            steps += [.copyFileRange, .ringSplice, .channels]
        }
        self.steps = steps
        _invariantCheck()
    }

    /// Whether a regular file of `size` bytes is copied whole by one
    /// thread's plain calls (`.wholeFile`): at most `IO.smallFileLimit`
    /// bytes, and nothing asked that only another step gives.
    package static func copiesWhole(size: Int64, request: Request) -> Bool {
        size <= Int64(IO.smallFileLimit) && (request.strategy == .automatic || request.strategy == .chain)
            && request.reflink != .always && request.sparse != .always && !request.directIO
    }

    /// Errors that say "not these files, not this way" (another file
    /// system, a file system or kernel that cannot), rather than a failure
    /// of the copy.
    package static let cannotCopySo: Set<Errno> = [.improperLink, .invalidArgument, .notSupported, .noFunction,
                                                   .inappropriateIOCTLForDevice]

    /// Whether the copy goes on with the next step after `step` failed
    /// with `errno` having moved `moved` bytes: only when nothing was
    /// moved, and the error says the step cannot copy these files (a
    /// reflink that was not required: any error; a step that needs pipes:
    /// also when none can be made).
    package func fallsThrough(from step: Step, errno: Errno, moved: Int64) -> Bool {
        guard moved == 0, errno != .canceled, let index = steps.firstIndex(of: step), index + 1 < steps.count else {
            return false
        }
        if step == .reflink { return true }
        if step.usesPipes && [.tooManyOpenFiles, .tooManyOpenFilesInSystem, .noMemory].contains(errno) { return true }
        return Self.cannotCopySo.contains(errno)
    }

    /// The rules every plan keeps.
    package func _invariantCheck() {
        precondition(!steps.isEmpty, "a plan has a step")
        precondition(Set(steps).count == steps.count, "no step twice")
        precondition(!steps.contains(.stream) || steps == [.stream], "a stream is the only step")
        precondition(!steps.contains(.wholeFile) || steps == [.wholeFile], "a whole-file copy is the only step")
        precondition(steps.firstIndex(of: .reflink).map { $0 == 0 } ?? true, "a reflink comes first")
        precondition(!preallocate || steps.contains(.copyFileRange), "preallocation only before a kernel copy")
        if let last = steps.last, steps.count > 1 {
            precondition(last == .channels, "a fallback chain ends with the channels, which any two regular files allow")
        }
    }
}
