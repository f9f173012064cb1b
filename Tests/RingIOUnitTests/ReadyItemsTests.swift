import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles

@Suite("ReadyItems: what a scheduler step releases, the first item inline")
struct ReadyItemsTests {
    @Test("items come out in the order they went in, across the inline item and the array")
    func order() {
        var ready = ReadyItems<Int>()
        #expect(ready.isEmpty && ready.count == 0 && Array(ready) == [])
        ready.append(1)
        #expect(!ready.isEmpty && ready.count == 1 && Array(ready) == [1])
        ready.append(2)
        ready.append(3)
        #expect(ready.count == 3 && Array(ready) == [1, 2, 3])
        var more: ReadyItems<Int> = [4]
        more += [5, 6]
        ready += more
        ready += []
        #expect(ready.count == 6 && Array(ready) == [1, 2, 3, 4, 5, 6])
        var fromEmpty = ReadyItems<Int>()
        fromEmpty += more
        #expect(Array(fromEmpty) == [4, 5, 6])
    }
}
