import Testing
@testable import ringcp

/// The fast parser (`Options.parseFast`) against ArgumentParser (`RingCP`):
/// where the fast one answers, both must give the same options; where it
/// gives up, ArgumentParser decides (and prints the errors and help).
@Suite("ringcp's two command-line parsers")
struct OptionsParsingTests {
    /// What ArgumentParser makes of `arguments`: the options, or nil for an error or help.
    static func slow(_ arguments: [String]) -> Options? {
        (try? RingCP.parseAsRoot(arguments) as? RingCP)?.options
    }

    /// Command lines the fast parser must take itself (the ones copies are made with).
    static let common: [[String]] = [
        ["a", "b"],
        ["a", "b", "c", "dir"],
        ["-r", "src", "dst"],
        ["-R", "src", "dst"],
        ["-rp", "src", "dst"],
        ["-a", "src", "dst"],
        ["-dRv", "src", "dst"],
        ["-Pf", "a", "b"],
        ["-L", "-H", "a", "b"],
        ["-l", "a", "b"],
        ["-s", "a", "b"],
        ["-bu", "a", "b"],
        ["-i", "a", "b"],
        ["-n", "a", "b"],
        ["-T", "a", "b"],
        ["-t", "dir", "a", "b"],
        ["--target-directory", "dir", "a"],
        ["--target-directory=dir", "a"],
        ["a", "-r", "b"],
        ["a", "b", "-v"],
        ["-S", ".bak", "-b", "a", "b"],
        ["--suffix=.old", "--backup=numbered", "a", "b"],
        ["--backup=existing", "a", "b"],
        ["--preserve=mode,timestamps", "a", "b"],
        ["--preserve=all", "--no-preserve=mode", "a", "b"],
        ["--preserve=mode", "--preserve=links", "a", "b"],
        ["--no-preserve", "mode", "a", "b"],
        ["--update=older", "a", "b"],
        ["--update", "none", "a", "b"],
        ["--reflink=never", "a", "b"],
        ["--reflink=always", "a", "b"],
        ["--sparse=always", "a", "b"],
        ["--sparse=never", "a", "b"],
        ["--jobs=8", "-r", "a", "b"],
        ["--jobs", "3", "a", "b"],
        ["--jobs=+5", "a", "b"],
        ["--method=kernel", "a", "b"],
        ["--method", "channels", "--direct", "a", "b"],
        ["--progress", "a", "b"],
        ["--no-progress", "a", "b"],
        ["--verify", "--in-place", "a", "b"],
        ["--remove-destination", "--attributes-only", "a", "b"],
        ["--copy-contents", "--parents", "--keep-directory-symlink", "-r", "a", "b"],
        ["--interactive", "--no-clobber", "--force", "--verbose", "--debug", "a", "b"],
        ["--recursive", "--archive", "--dereference", "--no-dereference", "a", "b"],
        ["--link", "a", "b"],
        ["--symbolic-link", "a", "b"],
        ["--no-target-directory", "a", "b"],
        ["-r", "-r", "a", "b"],
        ["-", "b"],
        ["a", "-"],
        ["--", "-odd", "b"],
        ["-r", "--", "--help", "-x", "b"],
        ["", "b"],
        ["a b", "c\td"],
        ["é", "ü"],
        [],
        ["a"],
    ]

    @Test("the command lines copies are made with: the fast parser takes them, as ArgumentParser does")
    func common() {
        for arguments in Self.common {
            guard case .run(let fast)? = Options.parseFast(arguments) else {
                Issue.record("the fast parser gave up on \(arguments)")
                continue
            }
            #expect(fast == Self.slow(arguments), "\(arguments)")
        }
        #expect(Options.parseFast(["--version"]) == .version)
    }

    /// Command lines that are errors, help, or not worth a fast path: the
    /// fast parser must give them to ArgumentParser.
    static let declined: [[String]] = [
        ["--help"],
        ["-h"],
        ["--version", "a"],
        ["a", "--version"],
        ["--bogus", "a", "b"],
        ["-Z", "a", "b"],
        ["-rZ", "a", "b"],
        ["-rt", "dir", "a"],
        ["-tdir", "a"],
        ["-t"],
        ["-t", "-r", "a"],
        ["--target-directory"],
        ["--target-directory="],
        ["--suffix", "-x", "a", "b"],
        ["--recursive=yes", "a", "b"],
        ["--progress", "--no-progress", "a", "b"],
        ["--progress=1", "a", "b"],
        ["--jobs=0", "a", "b"],
        ["--jobs=-1", "a", "b"],
        ["--jobs=x", "a", "b"],
        ["--jobs=2", "--jobs=3", "a", "b"],
        ["-t", "d1", "-t", "d2", "a"],
        ["--method=fast", "a", "b"],
        ["--reflink=maybe", "a", "b"],
        ["--sparse=sometimes", "a", "b"],
        ["--update=newer", "a", "b"],
        ["--backup=bogus", "a", "b"],
        ["--preserve=colour", "a", "b"],
        ["-l", "-s", "a", "b"],
        ["-b", "-n", "a", "b"],
        ["--reflink=always", "--sparse=never", "a", "b"],
        ["-5", "a"],
    ]

    @Test("errors, help and odd forms go to ArgumentParser")
    func declined() {
        for arguments in Self.declined {
            #expect(Options.parseFast(arguments) == nil, "\(arguments)")
        }
    }

    @Test("every option the fast parser knows, each alone and together, parses as ArgumentParser parses it")
    func everyOption() {
        let singles: [[String]] = [
            "-r", "-R", "-a", "-d", "-P", "-L", "-H", "-p", "-l", "-s", "-b", "-u", "-i", "-n", "-f", "-v", "-T",
            "--recursive", "--archive", "--no-dereference", "--dereference", "--link", "--symbolic-link",
            "--remove-destination", "--attributes-only", "--copy-contents", "--parents", "--interactive",
            "--keep-directory-symlink", "--debug", "--no-clobber", "--force", "--verbose", "--no-target-directory",
            "--verify", "--in-place", "--direct", "--progress", "--no-progress",
        ].map { [$0] } + [
            ["--preserve=xattr"], ["--no-preserve=ownership"], ["--backup=t"], ["--suffix=~~"], ["-S", "x"],
            ["--update=none-fail"], ["--reflink=auto"], ["--sparse=auto"], ["-t", "d"], ["--jobs=1"],
            ["--method=range"],
        ]
        for option in singles {
            for arguments in [option + ["a", "b"], ["a"] + option + ["b"], ["a", "b"] + option] {
                let fast = Options.parseFast(arguments)
                let slow = Self.slow(arguments)
                if case .run(let options)? = fast {
                    #expect(options == slow, "\(arguments)")
                } else {
                    // Only a combination that is an error may be declined.
                    #expect(slow == nil, "the fast parser gave up on \(arguments), which ArgumentParser takes")
                }
            }
        }
        // Pairs of flags, in both orders: the same outcome from both parsers.
        let flags = singles.filter { $0.count == 1 && !$0[0].contains("=") }.map { $0[0] }
        for first in flags {
            for second in flags {
                let arguments = [first, second, "a", "b"]
                let fast = Options.parseFast(arguments)
                let slow = Self.slow(arguments)
                if case .run(let options)? = fast {
                    #expect(options == slow, "\(arguments)")
                } else if first != second && !(first.hasSuffix("progress") && second.hasSuffix("progress")) {
                    #expect(slow == nil, "the fast parser gave up on \(arguments), which ArgumentParser takes")
                }
            }
        }
    }
}
