import Testing
@testable import ringcp

@Suite("ringcp path helpers")
struct PathTests {
    @Test func baseNames() {
        #expect(baseName("a/b/c") == "c")
        #expect(baseName("a/b/") == "b")
        #expect(baseName("/") == "/")
        #expect(baseName("file") == "file")
    }

    @Test func parents() {
        #expect(parentOf("a/b/c") == "a/b")
        #expect(parentOf("/c") == "/")
        #expect(parentOf("c") == ".")
        #expect(parentOf("a/b/") == "a")
    }

    @Test func formatting() {
        #expect(formatBytes(17) == "17 B")
        #expect(formatBytes(1536) == "1.50 KiB")
        #expect(formatBytes(1 << 30) == "1.00 GiB")
        #expect(formatBytes(300 << 20) == "300 MiB")
        #expect(formatDuration(7) == "0:07")
        #expect(formatDuration(3723) == "1:02:03")
        #expect(fixed(2.0, 2) == "2.00")
        #expect(fixed(2.456, 1) == "2.5")
    }
}
