import SystemPackage

/// Which of a tree copy's batches may start: at most `tasks` at once in
/// all, and at most `perDirectory` of them writing into one destination
/// directory.
///
/// Files created in one directory take its lock one after another (the
/// kernel's create runs under the directory's `i_rwsem`), so more batches
/// in one directory than can run (one on each pool worker) and wait (one
/// behind each) add no overlap, only waiters: a pool worker that looks
/// blocked on the lock gets company from the pool's watchdog, and on ext4
/// a waiter spins on the lock while its holder runs. Batches of other
/// directories still fill the remaining slots.
package struct TreeCopySlots: Sendable {
    /// Batches at once, in all.
    package let tasks: Int
    /// Batches at once writing into one directory.
    package let perDirectory: Int
    package private(set) var running = 0
    /// The batches running for each destination directory (none at 0).
    package private(set) var byDirectory: [FilePath: Int] = [:]

    package init(tasks: Int, perDirectory: Int) {
        self.tasks = max(1, tasks)
        self.perDirectory = max(1, min(perDirectory, self.tasks))
    }

    /// Whether a batch writing into `directory` may start now.
    package func canStart(in directory: FilePath) -> Bool {
        running < tasks && byDirectory[directory, default: 0] < perDirectory
    }

    /// A batch writing into `directory` starts (`canStart(in:)` was true).
    package mutating func start(in directory: FilePath) {
        running += 1
        byDirectory[directory, default: 0] += 1
        _invariantCheck()
    }

    /// A batch writing into `directory` has finished.
    package mutating func finish(in directory: FilePath) {
        running -= 1
        let left = byDirectory[directory, default: 0] - 1
        byDirectory[directory] = left > 0 ? left : nil
        _invariantCheck()
    }

    /// No count below zero or over its limit, and the directories' counts
    /// add up to `running`. Debug builds only.
    @inline(__always)
    package func _invariantCheck() {
        #if DEBUG
        precondition(running >= 0 && running <= tasks, "TreeCopySlots: \(running) running of \(tasks)")
        precondition(byDirectory.values.allSatisfy { $0 > 0 && $0 <= perDirectory },
                     "TreeCopySlots: a directory's count out of 1...\(perDirectory): \(byDirectory)")
        precondition(byDirectory.values.reduce(0, +) == running, "TreeCopySlots: counts do not add up to \(running)")
        #endif
    }
}
