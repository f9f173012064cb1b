import SystemPackage
import Testing
import RingIOFiles

/// `TreeCopySlots` with no kernel: a tree copy's batches at once, in all
/// and in one destination directory.
@Suite("TreeCopySlots")
struct TreeCopySlotsTests {
    @Test("at most perDirectory batches in one directory; other directories take the remaining slots; a finish frees its own")
    func limits() {
        var slots = TreeCopySlots(tasks: 8, perDirectory: 2)
        let a: FilePath = "/d/a", b: FilePath = "/d/b"
        slots.start(in: a)
        slots.start(in: a)
        #expect(!slots.canStart(in: a))
        #expect(slots.canStart(in: b))
        for _ in 0..<2 { slots.start(in: b) }
        for index in 0..<4 { slots.start(in: FilePath("/d/c\(index)")) }
        #expect(slots.running == 8)
        #expect(!slots.canStart(in: "/d/e"))
        slots.finish(in: b)
        #expect(!slots.canStart(in: a))
        #expect(slots.canStart(in: b) && slots.canStart(in: "/d/e"))
        slots.finish(in: a)
        #expect(slots.canStart(in: a))
        #expect(slots.byDirectory[a] == 1 && slots.byDirectory[b] == 1)
        slots.finish(in: a)
        #expect(slots.byDirectory[a] == nil && slots.running == 5)
    }

    @Test("limits are at least 1, perDirectory no more than tasks")
    func clamped() {
        let none = TreeCopySlots(tasks: 0, perDirectory: 0)
        #expect(none.tasks == 1 && none.perDirectory == 1 && none.canStart(in: "/x"))
        let wide = TreeCopySlots(tasks: 2, perDirectory: 16)
        #expect(wide.perDirectory == 2)
    }
}
