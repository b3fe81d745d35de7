import XCTest
import VeloCore

/// Property tests of the prefix index: random insert / match / release / evict sequences keep
/// the tree, the reference counts and the free list consistent, and no page is freed while a
/// sequence still holds it.
final class RadixCacheTests: XCTestCase {
    func makePool(pages: Int = 64, pageSize: Int = 4) throws -> PagePool {
        try PagePool(pageCount: pages, pageSize: pageSize, layers: 1, kvDim: 2)
    }

    func testMatchReturnsLongestFullPagePrefix() throws {
        let pool = try makePool()
        let cache = RadixCache(pool: pool)
        let tokens: [Int32] = Array(0..<10)
        var table = BlockTable()
        XCTAssertTrue(table.reserve(10, in: pool))
        cache.insert(tokens, pages: table.pages)
        XCTAssertEqual(cache.pagesHeld, 2, "only the two full pages are indexed")
        XCTAssertEqual(cache.match(tokens, limit: 9), Array(table.pages.prefix(2)))
        XCTAssertEqual(cache.match(tokens, limit: 7), [table.pages[0]], "the limit cuts at whole pages")
        XCTAssertEqual(cache.match([0, 1, 2, 9, 9, 9, 9, 9], limit: 8), [], "a different first page is a miss")
        XCTAssertEqual(cache.match(Array(0..<6) + [99, 99], limit: 8), [table.pages[0]])
        table.releaseAll(to: pool)
        XCTAssertEqual(pool.usedPages, 2, "the tree keeps its pages after the sequence is done")
        XCTAssertNil(cache.validate())
    }

    func testEvictionSkipsPagesInUseAndFreesLeavesFirst() throws {
        let pool = try makePool(pages: 8)
        let cache = RadixCache(pool: pool)
        var a = BlockTable()
        XCTAssertTrue(a.reserve(12, in: pool))
        cache.insert(Array(0..<12), pages: a.pages) // 3 pages, still held by `a`
        XCTAssertEqual(cache.evict(3), 0, "pages a sequence holds are never evicted")
        let held = a.pages
        a.releaseAll(to: pool)
        XCTAssertEqual(cache.evict(1), 1)
        XCTAssertEqual(pool.refcount(held[2]), 0, "the deepest page goes first")
        XCTAssertEqual(pool.refcount(held[0]), 1)
        XCTAssertEqual(cache.evict(5), 2)
        XCTAssertEqual(pool.freePages, 8)
        XCTAssertNil(cache.validate())
    }

    func testRandomOperationsKeepInvariants() throws {
        var rng = SeededRandom(seed: 42)
        func rand(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
        let pool = try makePool(pages: 48, pageSize: 4)
        let cache = RadixCache(pool: pool)
        var live: [(tokens: [Int32], table: BlockTable)] = []
        for step in 0..<5000 {
            switch rand(4) {
            case 0, 1: // admit a sequence: reuse the cached prefix, reserve the rest
                let len = 1 + rand(20)
                // few distinct prefixes, so matches happen often
                let tokens = (0..<len).map { i in Int32(i < 8 ? rand(2) : rand(50)) }
                var t = BlockTable()
                let pages = cache.match(tokens, limit: tokens.count - 1)
                for p in pages { pool.retain(p) }
                t.pages = pages
                t.length = pages.count * pool.pageSize
                if !t.reserve(tokens.count - t.length, in: pool) {
                    cache.evict(8)
                    if !t.reserve(tokens.count - t.length, in: pool) { t.releaseAll(to: pool); break }
                }
                t.length = tokens.count
                live.append((tokens, t))
            case 2: // finish one: index its pages, drop its references
                guard !live.isEmpty else { break }
                var s = live.remove(at: rand(live.count))
                cache.insert(s.tokens, pages: s.table.pages)
                s.table.releaseAll(to: pool)
            default:
                cache.evict(1 + rand(6))
            }
            if let problem = cache.validate() { XCTFail("step \(step): \(problem)"); return }
            // every page a live sequence holds must still be allocated
            for s in live { for p in s.table.pages where pool.refcount(p) < 1 { XCTFail("step \(step): page \(p) freed while in use"); return } }
            // accounting: each reference is the tree's or a sequence's
            var refs = [Int32: Int32]()
            for s in live { for p in s.table.pages { refs[p, default: 0] += 1 } }
            let used = (0..<Int32(pool.pageCount)).filter { pool.refcount($0) > 0 }
            XCTAssertEqual(used.count, pool.usedPages)
            for p in used where pool.refcount(p) < refs[p, default: 0] { XCTFail("page \(p) has fewer references than holders"); return }
        }
        for var s in live { s.table.releaseAll(to: pool) }
        cache.clear()
        XCTAssertEqual(pool.freePages, pool.pageCount, "everything returns to the free list")
    }
}
