/// Candidates for the merge loops order themselves: `precedes` is true when `a` must be merged before `b`.
protocol MergeCandidate {
    static func precedes(_ a: Self, _ b: Self) -> Bool
}

/// A binary min-heap (by `precedes`) that keeps its storage between uses. The merge loops
/// spend much of their time here, hence the hole-moving sifts over raw storage.
struct MergeQueue<Element: MergeCandidate> {
    private var items: [Element] = []

    var isEmpty: Bool { items.isEmpty }

    mutating func removeAll() {
        items.removeAll(keepingCapacity: true)
    }

    mutating func push(_ e: Element) {
        items.append(e)
        items.withUnsafeMutableBufferPointer { h in
            var i = h.count - 1
            while i > 0 {
                let parent = (i - 1) >> 1
                guard Element.precedes(e, h[parent]) else { break }
                h[i] = h[parent]
                i = parent
            }
            h[i] = e
        }
    }

    /// Removes the first element. Bottom-up: the hole left at the root sinks along the
    /// better children to a leaf (one comparison per level), then the last element rises
    /// from there — fewer comparisons than the textbook sift-down.
    mutating func pop() -> Element? {
        guard let last = items.popLast() else { return nil }
        if items.isEmpty { return last }
        return items.withUnsafeMutableBufferPointer { h in
            let top = h[0]
            let n = h.count
            var i = 0
            while true {
                var child = 2 * i + 1
                if child >= n { break }
                if child + 1 < n && Element.precedes(h[child + 1], h[child]) { child += 1 }
                h[i] = h[child]
                i = child
            }
            while i > 0 {
                let parent = (i - 1) >> 1
                guard Element.precedes(last, h[parent]) else { break }
                h[i] = h[parent]
                i = parent
            }
            h[i] = last
            return top
        }
    }
}
