// What every benchmark runner here shares: a monotonic clock, medians and
// number formatting for the printed tables (no Foundation).
#if canImport(Glibc)
import Glibc
#endif

/// Monotonic nanoseconds.
public func now() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// `value` with `digits` decimals.
public func fixed(_ value: Double, _ digits: Int) -> String {
    if !value.isFinite { return "\(value)" }
    var scale = 1.0
    for _ in 0..<digits { scale *= 10 }
    let scaled = Int((abs(value) * scale).rounded())
    let whole = scaled / Int(scale), frac = scaled % Int(scale)
    let f = String(frac)
    let sign = value < 0 ? "-" : ""
    return digits == 0 ? "\(sign)\(whole)" : "\(sign)\(whole)." + String(repeating: "0", count: digits - f.count) + f
}

/// The median of `xs` (not empty).
public func median(_ xs: [Double]) -> Double {
    let s = xs.sorted()
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}

/// `s` padded with spaces on the right (`pad`) or the left (`lpad`) to `n` characters.
public func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s : s + String(repeating: " ", count: n - s.count) }
public func lpad(_ s: String, _ n: Int) -> String { s.count >= n ? s : String(repeating: " ", count: n - s.count) + s }
