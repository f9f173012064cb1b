// Names the documentation's code blocks may use without defining them, so
// that each block can show only what it is about. scripts/check-docs compiles
// every ```swift block of the README, CONTRIBUTING.md, docs/ and the DocC
// articles against this file and the library; it never runs them (except the
// README's first block, its main.swift, which it runs).
import RingIO
import SystemPackage

/// A queue for handlers.
let queue = IOQueue(label: "docs")
/// The read end of a pipe (say, a child process's standard output).
let pipeReader = FileDescriptor.standardInput
/// A record to append.
let record = DataChunk("a record\n".utf8)
/// Does something with some bytes.
func consume(_ chunk: DataChunk) {}
