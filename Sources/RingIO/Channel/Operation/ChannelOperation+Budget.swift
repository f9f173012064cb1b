import RingIOBase
@_spi(Engine) import RingIOEngine
import RingIOData
import RingIOQueue
// The engine's read budget (`ReadBudget`): a read takes the bytes of its
// buffer before allocating it, or waits, holding no buffer, until they are
// granted.
extension ChannelOperation: ReadBudgetWaiter {
    /// With the lock held: whether `bytes` of the budget are this
    /// operation's for its next buffer; if not, it now waits for them.
    func takeBudgetLocked(_ bytes: Int) -> Bool {
        if budgetTicket != nil { return false }
        if budgetGranted > 0 {
            let granted = budgetGranted
            budgetGranted = 0
            if granted == bytes { return true }
            engine.readBudget.give(granted)
        }
        switch engine.readBudget.take(bytes, orQueue: self) {
        case .taken:
            return true
        case .queued(let ticket):
            budgetTicket = ticket
            return false
        }
    }

    /// With the lock held: a stopped operation needs no more bytes.
    func withdrawFromBudgetLocked() {
        if let ticket = budgetTicket {
            budgetTicket = nil
            engine.readBudget.withdraw(ticket)
        }
    }

    /// The bytes waited for are this operation's: the reads go on (or,
    /// if it has ended or been stopped since, the bytes go back).
    package func readBudgetGranted(_ bytes: Int) {
        lock.lock()
        budgetTicket = nil
        budgetGranted = bytes
        let fresh = state.issue(host: host)
        let requests = requestsLocked(fresh)
        if budgetGranted > 0 {
            engine.readBudget.give(budgetGranted)
            budgetGranted = 0
        }
        lock.unlock()
        submit(requests)
    }
}
