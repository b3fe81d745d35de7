/// The prefix index: a radix tree over full KV pages. Each edge is labelled with the token ids
/// of one whole page and its node holds that page's id, so a path from the root spells a
/// token prefix whose K/V are already computed. The tree holds one pool reference per page;
/// sequences that use a page hold their own. Partly filled pages are never indexed, so a
/// sequence only ever writes into pages it owns alone.
///
/// A model with a recurrent state (DeltaNet layers) can resume only where that state was saved:
/// a node may hold a checkpoint, the state after every token down to its page, and such a
/// model's matches end at the deepest node that has one (`matchWithState`). Checkpoints are few
/// and large, so they come from a fixed set of ids; when none is free the least recently used
/// one no sequence is about to load is dropped (its node keeps its page).
public final class RadixCache {
    final class Node {
        let tokens: [Int32]
        let page: Int32
        weak var parent: Node?
        var children: [[Int32]: Node] = [:]
        var lastUse: UInt64 = 0
        /// The checkpoint of the state after this node's page (-1: none).
        var state: Int32 = -1

        init(tokens: [Int32], page: Int32, parent: Node?) {
            self.tokens = tokens
            self.page = page
            self.parent = parent
        }
    }

    public let pool: PagePool
    let root = Node(tokens: [], page: -1, parent: nil)
    private var clock: UInt64 = 0
    public private(set) var nodeCount = 0
    // counters for the metrics
    public private(set) var hits = 0
    public private(set) var misses = 0
    public private(set) var cachedTokensServed = 0
    public private(set) var evictions = 0
    /// Checkpoint ids no node holds and no sequence has taken.
    private var freeStates: [Int32]
    /// Checkpoints a sequence is to load (their nodes may not drop them), with how many.
    private var pinned: [Int32: Int] = [:]
    public let stateCapacity: Int

    public init(pool: PagePool, states: Int = 0) {
        self.pool = pool
        stateCapacity = states
        freeStates = (0..<Int32(states)).reversed()
    }

    var pageSize: Int { pool.pageSize }

    /// The nodes of the longest cached prefix of `tokens`, at most `limit` tokens, in order;
    /// `touch`: they count as used now (a match, not a look).
    private func walk(_ tokens: [Int32], limit: Int, touch: Bool) -> [Node] {
        if touch { clock += 1 }
        var node = root, out: [Node] = [], at = 0
        while at + pageSize <= min(limit, tokens.count), let child = node.children[Array(tokens[at..<at + pageSize])] {
            if touch { child.lastUse = clock }
            out.append(child)
            node = child
            at += pageSize
        }
        return out
    }

    /// The longest cached prefix of `tokens`, at most `limit` tokens, as page ids. The caller
    /// takes its own reference on each page (`pool.retain`) before using them.
    public func match(_ tokens: [Int32], limit: Int) -> [Int32] {
        let pages = walk(tokens, limit: limit, touch: true).map(\.page)
        if pages.isEmpty { misses += 1 } else { hits += 1; cachedTokensServed += pages.count * pageSize }
        return pages
    }

    /// The longest cached prefix of `tokens` (at most `limit`) that ends at a checkpoint: its
    /// pages and the checkpoint, pinned until `unpin` (the caller loads it into its state);
    /// `cachedPages`: how far the cached pages went, checkpoint or not (where this prompt
    /// parts from one cached before).
    func matchWithState(_ tokens: [Int32], limit: Int) -> (pages: [Int32], state: Int32?, cachedPages: Int) {
        let nodes = walk(tokens, limit: limit, touch: true)
        guard let last = nodes.lastIndex(where: { $0.state >= 0 }) else {
            misses += 1
            return ([], nil, nodes.count)
        }
        hits += 1
        cachedTokensServed += (last + 1) * pageSize
        let state = nodes[last].state
        pinned[state, default: 0] += 1
        return (nodes[...last].map(\.page), state, nodes.count)
    }

    func unpin(_ state: Int32) {
        pinned[state]! -= 1
        if pinned[state] == 0 { pinned[state] = nil }
    }

    /// A checkpoint id for a state about to be saved: a free one, else the least recently used
    /// node's that is not pinned (nil when every one is).
    func takeState() -> Int32? {
        if let id = freeStates.popLast() { return id }
        var oldest: Node?
        var stack = [root]
        while let n = stack.popLast() {
            if n.state >= 0, pinned[n.state] == nil, oldest.map({ n.lastUse < $0.lastUse }) ?? true { oldest = n }
            stack.append(contentsOf: n.children.values)
        }
        guard let oldest else { return nil }
        defer { oldest.state = -1 }
        return oldest.state
    }

    /// Gives back a checkpoint taken and not attached (its sequence ended first).
    func returnState(_ id: Int32) { freeStates.append(id) }

    /// Indexes a prefix's full pages with the checkpoint of the state after them (`tokens` a
    /// whole number of pages). A node that has a state already keeps it and the id goes back.
    func insert(_ tokens: [Int32], pages: [Int32], state: Int32) {
        precondition(tokens.count % pageSize == 0 && tokens.count / pageSize == pages.count, "a checkpoint off a page boundary")
        let node = indexed(tokens, pages: pages)
        if node.state >= 0 { freeStates.append(state) } else { node.state = state }
    }

    /// Indexes the full pages of a sequence's computed prefix. Pages already indexed under the
    /// same tokens stay as they are (the sequence's copy is simply not shared).
    public func insert(_ tokens: [Int32], pages: [Int32]) { _ = indexed(tokens, pages: pages) }

    /// `insert`, returning the node of the last full page (the root when there is none).
    private func indexed(_ tokens: [Int32], pages: [Int32]) -> Node {
        clock += 1
        var node = root
        let full = min(tokens.count / pageSize, pages.count)
        for i in 0..<full {
            let key = Array(tokens[i * pageSize..<(i + 1) * pageSize])
            if let child = node.children[key] {
                child.lastUse = clock
                node = child
                continue
            }
            let child = Node(tokens: key, page: pages[i], parent: node)
            child.lastUse = clock
            pool.retain(pages[i])
            node.children[key] = child
            nodeCount += 1
            node = child
        }
        return node
    }

    /// Frees up to `pages` pages by dropping least-recently used leaves that no sequence
    /// uses (the tree's reference is the only one). Returns how many were freed.
    @discardableResult
    public func evict(_ pages: Int) -> Int {
        guard pages > 0 else { return 0 }
        var candidates = leaves().filter { pool.refcount($0.page) == 1 }
        var freed = 0
        while freed < pages, !candidates.isEmpty {
            // oldest first; removing a leaf can turn its parent into a candidate
            let i = candidates.indices.min { candidates[$0].lastUse < candidates[$1].lastUse }!
            let leaf = candidates.remove(at: i)
            remove(leaf)
            freed += 1
            if let p = leaf.parent, p !== root, p.children.isEmpty, pool.refcount(p.page) == 1 {
                candidates.append(p)
            }
        }
        evictions += freed
        return freed
    }

    /// Drops everything the tree holds that no sequence uses.
    public func clear() {
        while evict(nodeCount) > 0 {}
    }

    private func remove(_ leaf: Node) {
        leaf.parent?.children[leaf.tokens] = nil
        pool.release(leaf.page)
        // (a pinned state's node holds a page its sequence also holds: never a candidate)
        if leaf.state >= 0 { freeStates.append(leaf.state) }
        nodeCount -= 1
    }

    /// Checkpoints the tree holds.
    public var statesHeld: Int {
        var held = 0
        var stack = [root]
        while let n = stack.popLast() {
            if n.state >= 0 { held += 1 }
            stack.append(contentsOf: n.children.values)
        }
        return held
    }

    private func leaves() -> [Node] {
        var out: [Node] = []
        var stack = [root]
        while let n = stack.popLast() {
            if n.children.isEmpty, n !== root { out.append(n) }
            stack.append(contentsOf: n.children.values)
        }
        return out
    }

    /// Pages the tree holds, and those of them also used by a sequence.
    public var pagesHeld: Int { nodeCount }
    public var pagesShared: Int {
        var shared = 0
        var stack = [root]
        while let n = stack.popLast() {
            if n !== root, pool.refcount(n.page) > 1 { shared += 1 }
            stack.append(contentsOf: n.children.values)
        }
        return shared
    }

    /// Every (tokens, page) on the path of a prefix, for saving it.
    func path(for tokens: [Int32]) -> [(tokens: [Int32], page: Int32)] {
        walk(tokens, limit: tokens.count, touch: false).map { ($0.tokens, $0.page) }
    }

    /// Checks the tree's invariants (for tests): every node's page is live and referenced by
    /// the tree, no page appears twice, parents link back, and no checkpoint is both held and
    /// free, or held twice.
    public func validate() -> String? {
        var seen = Set<Int32>(), states = Set(freeStates)
        if states.count != freeStates.count { return "a checkpoint is free twice" }
        var stack = [root]
        var count = 0
        while let n = stack.popLast() {
            for (key, child) in n.children {
                if child.parent !== n { return "node's parent link is wrong" }
                if key != child.tokens || key.count != pageSize { return "edge label mismatch" }
                if pool.refcount(child.page) < 1 { return "page \(child.page) is in the tree but free" }
                if !seen.insert(child.page).inserted { return "page \(child.page) appears twice" }
                if child.state >= 0, !states.insert(child.state).inserted { return "checkpoint \(child.state) is held twice, or held and free" }
                count += 1
                stack.append(child)
            }
        }
        return count == nodeCount ? nil : "node count \(nodeCount) but \(count) nodes found"
    }
}
