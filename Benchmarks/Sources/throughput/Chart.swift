// The chart: one panel per workload (each with its own scale: GiB/s, reads/s
// or files/s), a horizontal bar per system at its median, a whisker from its
// minimum to its maximum, RingIO's bars in colour. Plain SVG text, no
// dependencies.
import BenchSupport

struct Chart {
    let summaries: [Summary]
    let workloads: [Workload]
    let options: Options
    let log: AppendLog
    let machine: Machine

    private let columns = 2
    private let panelWidth = 600.0
    private let labelWidth = 200.0
    private let valueWidth = 80.0
    private let barHeight = 16.0
    private let barGap = 6.0
    private let panelTop = 30.0
    private let panelBottom = 24.0
    private let margin = 20.0

    private static let ringIOColour = "#e4572e"
    private static let ringcpColour = "#f3a712"
    private static let otherColour = "#8d99ae"

    func svg() -> String {
        let rows = max(1, (workloads.count + columns - 1) / columns)
        let panelHeights = workloads.map { panelHeight($0) }
        let rowHeights = (0..<rows).map { r in
            (0..<columns).compactMap { c in panelHeights.indices.contains(r * columns + c) ? panelHeights[r * columns + c] : nil }.max() ?? 0
        }
        let header = 56.0, footer = 40.0
        let width = margin * 2 + panelWidth * Double(columns)
        let height = header + rowHeights.reduce(0, +) + footer
        var out = """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" \
            viewBox="0 0 \(Int(width)) \(Int(height))" font-family="Helvetica, Arial, sans-serif" font-size="12">
            <rect width="100%" height="100%" fill="white"/>
            <text x="\(margin)" y="24" font-size="17" font-weight="bold">\(escape("RingIO throughput: median of \(options.rounds) rounds, whiskers min – max"))</text>
            <text x="\(margin)" y="44" fill="#444">\(escape("\(sizeText(options.size)) file; every result checked; longer bars are faster"))</text>
            <rect x="\(Int(width - margin - 330))" y="32" width="12" height="12" fill="\(Self.ringIOColour)"/>
            <text x="\(Int(width - margin - 314))" y="43">RingIO</text>
            <rect x="\(Int(width - margin - 255))" y="32" width="12" height="12" fill="\(Self.ringcpColour)"/>
            <text x="\(Int(width - margin - 239))" y="43">ringcp (built on RingIO)</text>
            <rect x="\(Int(width - margin - 90))" y="32" width="12" height="12" fill="\(Self.otherColour)"/>
            <text x="\(Int(width - margin - 74))" y="43">others</text>

            """
        var y = header
        for r in 0..<rows {
            for c in 0..<columns {
                let i = r * columns + c
                guard workloads.indices.contains(i) else { continue }
                out += panel(workloads[i], x: margin + Double(c) * panelWidth, y: y)
            }
            y += rowHeights[r]
        }
        out += "<text x=\"\(margin)\" y=\"\(Int(height - 16))\" fill=\"#444\" font-size=\"11\">\(escape(machine.summary + "; " + machine.date))</text>\n"
        out += "</svg>\n"
        return out
    }

    private func rows(_ workload: Workload) -> [Summary] { summaries.filter { $0.workload == workload.rawValue } }

    private func panelHeight(_ workload: Workload) -> Double {
        panelTop + Double(rows(workload).count) * (barHeight + barGap) + panelBottom
    }

    private func panel(_ workload: Workload, x: Double, y: Double) -> String {
        let rows = rows(workload)
        let top = rows.compactMap { $0.max }.max() ?? 1
        let scale = niceCeiling(top)
        let barArea = panelWidth - labelWidth - valueWidth - margin
        let x0 = x + labelWidth
        var out = "<text x=\"\(x)\" y=\"\(Int(y + 16))\" font-size=\"13\" font-weight=\"bold\">\(escape(workload.shortTitle))</text>\n"
        let chartTop = y + panelTop
        let chartBottom = chartTop + Double(rows.count) * (barHeight + barGap)
        for tick in 0...4 {
            let value = scale * Double(tick) / 4
            let tx = x0 + barArea * Double(tick) / 4
            out += "<line x1=\"\(f(tx))\" y1=\"\(f(chartTop - 4))\" x2=\"\(f(tx))\" y2=\"\(f(chartBottom))\" stroke=\"#ddd\"/>\n"
            out += "<text x=\"\(f(tx))\" y=\"\(f(chartBottom + 14))\" text-anchor=\"middle\" fill=\"#666\" font-size=\"10\">\(escape(axisLabel(value, workload)))</text>\n"
        }
        for (i, s) in rows.enumerated() {
            let by = chartTop + Double(i) * (barHeight + barGap)
            let name = systemNames[s.system] ?? s.system
            let colour = s.system.hasPrefix("ringio") ? Self.ringIOColour : s.system == "ringcp" ? Self.ringcpColour : Self.otherColour
            let weight = s.system.hasPrefix("ringio") ? " font-weight=\"bold\"" : ""
            out += "<text x=\"\(f(x0 - 6))\" y=\"\(f(by + barHeight - 4))\" text-anchor=\"end\"\(weight)>\(escape(name))</text>\n"
            guard let m = s.median, let lo = s.min, let hi = s.max else {
                out += "<text x=\"\(f(x0 + 4))\" y=\"\(f(by + barHeight - 4))\" fill=\"#b00\">failed</text>\n"
                continue
            }
            let w = barArea * m / scale
            out += "<rect x=\"\(f(x0))\" y=\"\(f(by))\" width=\"\(f(w))\" height=\"\(f(barHeight))\" fill=\"\(colour)\"><title>\(escape("\(s.label): \(valueLabel(m, workload)) \(s.unit) (\(valueLabel(lo, workload)) – \(valueLabel(hi, workload)))"))</title></rect>\n"
            let (wx1, wx2, wy) = (x0 + barArea * lo / scale, x0 + barArea * hi / scale, by + barHeight / 2)
            out += "<line x1=\"\(f(wx1))\" y1=\"\(f(wy))\" x2=\"\(f(wx2))\" y2=\"\(f(wy))\" stroke=\"#222\"/>\n"
            out += "<line x1=\"\(f(wx1))\" y1=\"\(f(wy - 4))\" x2=\"\(f(wx1))\" y2=\"\(f(wy + 4))\" stroke=\"#222\"/>\n"
            out += "<line x1=\"\(f(wx2))\" y1=\"\(f(wy - 4))\" x2=\"\(f(wx2))\" y2=\"\(f(wy + 4))\" stroke=\"#222\"/>\n"
            out += "<text x=\"\(f(max(x0 + w, wx2) + 5))\" y=\"\(f(by + barHeight - 4))\"\(weight)>\(escape(valueLabel(m, workload)))</text>\n"
        }
        return out
    }

    private func valueLabel(_ v: Double, _ workload: Workload) -> String {
        workload.unit == .bytes ? fixed(v, 2) : v >= 10_000 ? fixed(v / 1000, 0) + "k" : grouped(v)
    }

    private func axisLabel(_ v: Double, _ workload: Workload) -> String {
        workload.unit == .bytes ? (v == v.rounded() ? fixed(v, 0) : fixed(v, 1)) : v >= 1000 ? fixed(v / 1000, 0) + "k" : fixed(v, 0)
    }

    /// The smallest of 1, 2, 2.5, 5 × 10^n at or above `value`.
    private func niceCeiling(_ value: Double) -> Double {
        guard value > 0 else { return 1 }
        var magnitude = 1.0
        while magnitude * 10 <= value { magnitude *= 10 }
        while magnitude > value { magnitude /= 10 }
        for step in [1.0, 2, 2.5, 5, 10] where step * magnitude >= value { return step * magnitude }
        return 10 * magnitude
    }

    private func f(_ v: Double) -> String { fixed(v, 1) }

    private func escape(_ s: String) -> String {
        var out = ""
        for c in s {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default: out.append(c)
            }
        }
        return out
    }
}
