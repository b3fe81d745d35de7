import XCTest
@testable import VeloCore

/// The step planner on its own, with no model: sequences, a page pool and hand-made outputs
/// (`ran`: what the scheduler does after a pass), as vLLM tests its scheduler. Admission under
/// the batch and page budgets, chunked prefill beside decodes, preemption and resume, prefix
/// hits, cancellation, guesses, and the stall that must end a sequence.
final class StepPlannerTests: XCTestCase {
    private var nextId = 0

    /// `states`: a model with a recurrent state, and as many checkpoints for the cache.
    private func planner(pages: Int = 32, pageSize: Int = 4, sequences: Int = 4, tokens: Int = 64, context: Int = 64,
                         cache: Bool = false, states: Int? = nil) throws -> StepPlanner {
        let pool = try PagePool(pageCount: pages, pageSize: pageSize, layers: 1, kvDim: 2)
        return StepPlanner(limits: .init(sequences: sequences, tokens: tokens, context: context), kv: pool,
                           cache: cache ? RadixCache(pool: pool, states: states ?? 0) : nil, stateSlots: states != nil)
    }

    private func seq(_ prompt: [Int32], embedding: Pooling? = nil) -> Sequence {
        nextId += 1
        return Sequence(id: nextId, request: GenerationRequest(prompt: prompt),
                        embedding: embedding.map { EmbeddingPool(pooling: $0, dim: 2) }, now: 0)
    }

    private func seq(length n: Int, from first: Int32 = 0) -> Sequence { seq((0..<n).map { first + Int32($0) }) }

    /// The pass's outputs applied by hand: each entry's positions computed, and every entry
    /// that reads logits takes `token` as its next (no guess kept).
    private func ran(_ plan: StepPlan, token: Int32 = 99, in p: StepPlanner? = nil) {
        for e in plan.entries {
            e.seq.computed += e.advance
            e.seq.table.length = e.seq.computed
        }
        p?.ran(plan)
        for e in plan.outputs { e.seq.tokens.append(token) }
    }

    /// What the scheduler's finish does to pages: full pages into the cache, the rest freed.
    private func finish(_ s: Sequence, in p: StepPlanner) {
        s.finishedFlag = true
        p.index(s)
        s.table.releaseAll(to: p.kv)
        p.dropFinished()
    }

    func testAdmitsUpToTheBatchLimitInOrder() throws {
        let p = try planner(sequences: 2)
        let (a, b, c) = (seq(length: 5), seq(length: 5), seq(length: 5))
        [a, b, c].forEach(p.submit)
        let plan = p.schedule()
        XCTAssertEqual(plan.admitted.map(\.id), [a.id, b.id])
        XCTAssertEqual(p.running.map(\.id), [a.id, b.id])
        XCTAssertEqual(p.waiting.map(\.id), [c.id], "the third waits for a free slot")
        XCTAssertEqual(plan.entries.map(\.advance), [5, 5])
        XCTAssertEqual(plan.entries.map(\.firstLogitRow), [0, 1])
        XCTAssertEqual(plan.batch.logitRows, [4, 9], "a whole prompt reads its last row only")
        XCTAssertEqual(plan.batch.positions, [0, 1, 2, 3, 4, 0, 1, 2, 3, 4])
        XCTAssertEqual(plan.batch.sequence, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
        ran(plan)
        finish(a, in: p)
        let next = p.schedule()
        XCTAssertEqual(next.admitted.map(\.id), [c.id], "a finished sequence's slot goes to the next in line")
        XCTAssertEqual(next.entries.map(\.seq.id), [b.id, c.id])
    }

    func testDecodesComeFirstAndPromptsAreChunkedToTheTokenBudget() throws {
        let p = try planner(tokens: 8)
        let a = seq(length: 3)
        p.submit(a)
        ran(p.schedule())
        XCTAssertEqual(a.pending, 1)
        let b = seq(length: 20, from: 100)
        p.submit(b)
        var plan = p.schedule()
        XCTAssertEqual(plan.entries.map(\.seq.id), [a.id, b.id], "the decode goes before the prompt")
        XCTAssertEqual(plan.entries[0].tokens, [99])
        XCTAssertEqual(plan.entries[1].tokens, Array(100..<107), "the prompt gets what is left of the budget")
        XCTAssertNil(plan.entries[1].firstLogitRow, "a chunk before the last reads no logits")
        XCTAssertEqual(plan.batch.logitRows, [0])
        XCTAssertEqual(b.table.pages.count, 2, "admission holds the first chunk's pages, not the whole prompt's")
        ran(plan)
        plan = p.schedule()
        XCTAssertEqual(plan.entries[1].tokens, Array(107..<114))
        ran(plan)
        plan = p.schedule()
        XCTAssertEqual(plan.entries[1].tokens, Array(114..<120), "the last chunk")
        XCTAssertEqual(plan.entries[1].firstLogitRow, 1, "and it reads its last row")
        XCTAssertEqual(plan.batch.logitRows, [0, 6])
        ran(plan)
        XCTAssertEqual(b.pending, 1)
        XCTAssertEqual(p.schedule().entries.map(\.tokens.count), [1, 1], "both decode now")
    }

    func testAPromptLargerThanThePoolWaitsThenIsRefusedWithoutLeakingPages() throws {
        let p = try planner(pages: 4, pageSize: 4) // 16 positions in all
        let a = seq(length: 10)
        p.submit(a)
        ran(p.schedule())
        let b = seq(length: 17)
        p.submit(b)
        let waiting = p.schedule()
        XCTAssertTrue(waiting.refused.isEmpty && waiting.admitted.isEmpty, "while others run, it waits for their pages")
        XCTAssertEqual(p.waiting.map(\.id), [b.id])
        XCTAssertEqual(waiting.entries.map(\.seq.id), [a.id])
        finish(a, in: p)
        let refused = p.schedule()
        XCTAssertEqual(refused.refused.map(\.seq.id), [b.id])
        XCTAssertEqual(refused.refused.first?.message, "the prompt needs 5 KV pages, the pool has 4")
        XCTAssertEqual(p.kv.freePages, 4, "the refused prompt holds no page")
        XCTAssertFalse(p.hasWork)
    }

    func testRefusesEmptyAndOverlongPrompts() throws {
        let p = try planner(context: 8)
        let (empty, long, fits, longEmbedding, embedding) = (seq([]), seq(length: 8), seq(length: 7),
                                                             seq(Array(0..<9), embedding: .mean), seq(Array(0..<8), embedding: .mean))
        [empty, long, fits, longEmbedding, embedding].forEach(p.submit)
        let plan = p.schedule()
        XCTAssertEqual(plan.refused.map(\.seq.id), [empty.id, long.id, longEmbedding.id])
        XCTAssertEqual(plan.refused.map(\.message), [
            "the prompt is empty",
            "the prompt has 8 tokens, more than the context size 8 allows (it needs room for at least one generated token)",
            "the input has 9 tokens, more than the context size 8",
        ])
        XCTAssertEqual(plan.admitted.map(\.id), [fits.id, embedding.id], "an embedding may fill the context: nothing follows it")
    }

    func testPreemptsTheYoungestWhenPagesRunOutAndResumesItFromScratch() throws {
        let p = try planner(pages: 6, pageSize: 4)
        let (a, b, c) = (seq(length: 7), seq(length: 7, from: 50), seq(length: 7, from: 80))
        [a, b, c].forEach(p.submit)
        ran(p.schedule()) // the prompts: 2 pages each, the pool is full
        ran(p.schedule()) // position 7: the last slot of each one's second page
        XCTAssertEqual(p.kv.freePages, 0)
        let plan = p.schedule() // position 8 needs a third page each
        XCTAssertEqual(plan.preempted.map(\.id), [c.id], "the youngest gives its pages up")
        XCTAssertEqual(plan.entries.map(\.seq.id), [a.id, b.id], "the others run on its pages; it does not run")
        XCTAssertEqual(p.preemptions, 1)
        XCTAssertEqual(p.waiting.map(\.id), [c.id])
        XCTAssertEqual(c.computed, 0)
        XCTAssertTrue(c.table.pages.isEmpty)
        XCTAssertEqual(c.tokens.count, 9, "what it generated stays: it is recomputed, not lost")
        ran(plan)
        XCTAssertTrue(p.schedule().admitted.isEmpty, "it waits while the pool is taken")
        finish(a, in: p)
        let resumed = p.schedule()
        XCTAssertEqual(resumed.admitted.map(\.id), [c.id])
        XCTAssertEqual(resumed.entries.last?.tokens, c.tokens, "prompt and generated tokens computed again in one pass")
        XCTAssertEqual(resumed.entries.last?.firstLogitRow, 1)
    }

    func testStallsWhenTheOnlySequenceCannotGrow() throws {
        let p = try planner(pages: 2, pageSize: 4)
        let a = seq(length: 7)
        p.submit(a)
        ran(p.schedule())
        ran(p.schedule())
        let plan = p.schedule()
        XCTAssertTrue(plan.entries.isEmpty)
        XCTAssertTrue(plan.stalled === a, "nothing to preempt: the sequence must end, not spin")
    }

    func testAPrefixHitSkipsCachedPagesAndLeavesATokenToCompute() throws {
        let p = try planner(pageSize: 4, cache: true)
        let a = seq(length: 10)
        p.submit(a)
        ran(p.schedule())
        let aPages = a.table.pages
        finish(a, in: p) // indexes its two full pages
        XCTAssertEqual(p.cache?.pagesHeld, 2)
        let b = seq(length: 10)
        p.submit(b)
        let plan = p.schedule()
        XCTAssertEqual(b.cachedTokens, 8)
        XCTAssertEqual(plan.entries.first?.tokens, [8, 9], "only the positions past the cached pages run")
        XCTAssertEqual(Array(plan.batch.positions), [8, 9])
        XCTAssertEqual(Array(b.table.pages.prefix(2)), Array(aPages.prefix(2)), "the cached pages are shared, not copied")
        // a prompt that is exactly the cached pages still computes its last page, for logits
        let c = seq(length: 8)
        p.submit(c)
        let next = p.schedule()
        XCTAssertEqual(c.cachedTokens, 4)
        XCTAssertEqual(next.entries.last?.tokens, [4, 5, 6, 7])
        XCTAssertEqual(p.cache?.hits, 2)
    }

    func testGuessesRideWithTheirDecodeAndCountOnce() throws {
        let p = try planner()
        let a = seq(length: 3)
        p.submit(a)
        ran(p.schedule())
        let guesses: [ObjectIdentifier: Guesses] = [ObjectIdentifier(a): ([5, 6, 7], [[(5, 1)], [(6, 1)], [(7, 1)]])]
        let plan = p.schedule(guesses: guesses)
        let e = try XCTUnwrap(plan.entries.first)
        XCTAssertEqual(e.tokens, [99, 5, 6, 7])
        XCTAssertEqual(e.proposals, [5, 6, 7])
        XCTAssertEqual(e.advance, 1, "guessed positions count only once verification keeps them")
        XCTAssertEqual(plan.batch.logitRows, [0, 1, 2, 3], "a row to check each guess, and one past them")
        XCTAssertEqual(plan.batch.positions, [3, 4, 5, 6])
    }

    func testCancelledBeforeRunningLeavesTheQueue() throws {
        let p = try planner(sequences: 1)
        let (a, b) = (seq(length: 3), seq(length: 3))
        p.submit(a)
        p.submit(b)
        XCTAssertTrue(p.removeWaiting(b.id) === b)
        XCTAssertNil(p.removeWaiting(b.id))
        XCTAssertEqual(p.waiting.map(\.id), [a.id])
    }

    func testAnEmbeddingPoolsItsRowsAndReadsNoLogits() throws {
        let p = try planner(tokens: 4)
        let e = seq(Array(0..<6), embedding: .mean)
        p.submit(e)
        let first = p.schedule()
        XCTAssertEqual(first.entries.first?.tokens.count, 4)
        XCTAssertNil(first.entries.first?.firstLogitRow)
        XCTAssertEqual(first.batch.hiddenRows, [0, 1, 2, 3], "mean pooling takes every row")
        XCTAssertEqual(first.pooled.count, 4)
        ran(first)
        let last = p.schedule()
        XCTAssertEqual(last.entries.first?.tokens, [4, 5], "its last token is prefill too")
        XCTAssertTrue(last.batch.logitRows.isEmpty)
        XCTAssertEqual(last.batch.hiddenRows, [0, 1])
    }

    // A model with a recurrent state: the cache resumes only at a checkpoint of it.

    func testAPromptIsCheckpointedAtItsLastPageBoundaryAndAnotherResumesThere() throws {
        let p = try planner(pageSize: 4, cache: true, states: 2)
        let a = seq(length: 10)
        p.submit(a)
        var plan = p.schedule()
        XCTAssertEqual(plan.entries.map(\.advance), [8], "the chunk stops at the last boundary before the last token")
        XCTAssertEqual(plan.batch.stateSaves.map(\.slot), [a.stateSlot!])
        XCTAssertTrue(plan.batch.stateLoads.isEmpty)
        ran(plan, in: p)
        XCTAssertEqual(p.cache!.statesHeld, 1, "the state after 8 tokens is indexed with their pages")
        plan = p.schedule()
        XCTAssertEqual(plan.entries.map(\.advance), [2])
        XCTAssertTrue(plan.batch.stateSaves.isEmpty, "one checkpoint a prompt")
        ran(plan, in: p)
        finish(a, in: p)
        XCTAssertNil(p.cache!.validate())
        // the next turn: the same 8 tokens and more
        let b = seq((0..<8).map { Int32($0) } + [50, 51, 52, 53, 54, 55, 56])
        p.submit(b)
        plan = p.schedule()
        XCTAssertEqual(b.cachedTokens, 8)
        XCTAssertEqual(plan.batch.stateLoads.map(\.slot), [b.stateSlot!], "its slot takes the checkpoint before the pass")
        XCTAssertEqual(plan.entries.map(\.advance), [4], "then up to its own last boundary (12), checkpointed too")
        XCTAssertEqual(plan.batch.stateSaves.count, 1)
        ran(plan, in: p)
        XCTAssertEqual(p.cache!.statesHeld, 2)
        XCTAssertNil(b.restoreState, "loaded: unpinned")
        XCTAssertNil(p.cache!.validate())
    }

    func testWherePromptsPartIsCheckpointedForTheNextThatSharesIt() throws {
        let p = try planner(pageSize: 4, cache: true, states: 4)
        // a system prompt of 8 tokens, then each request's own 6
        let system = (0..<8).map { Int32($0) }
        let a = seq(system + [40, 41, 42, 43, 44, 45])
        p.submit(a)
        ran(p.schedule(), in: p)
        ran(p.schedule(), in: p)
        finish(a, in: p) // checkpointed after 12 (its last boundary), which the others do not share
        let b = seq(system + [50, 51, 52, 53, 54, 55])
        p.submit(b)
        var plan = p.schedule()
        XCTAssertEqual(b.cachedTokens, 0, "the shared 8 have pages but no state")
        XCTAssertEqual(plan.entries.map(\.advance), [8], "b stops where it parts from a, to save the state there")
        ran(plan, in: p)
        plan = p.schedule()
        XCTAssertEqual(plan.entries.map(\.advance), [4], "then at its own last boundary")
        XCTAssertEqual(plan.batch.stateSaves.count, 1)
        ran(plan, in: p)
        ran(p.schedule(), in: p)
        finish(b, in: p)
        let c = seq(system + [60, 61, 62])
        p.submit(c)
        plan = p.schedule()
        XCTAssertEqual(c.cachedTokens, 8, "a third request with the system prompt resumes after it")
        XCTAssertEqual(plan.batch.stateLoads.count, 1)
        XCTAssertNil(p.cache!.validate())
    }

    func testPagesWithoutACheckpointAreNotResumed() throws {
        let p = try planner(pageSize: 4, cache: true, states: 2)
        let a = seq(length: 9)
        p.submit(a)
        ran(p.schedule(), in: p)
        ran(p.schedule(), in: p)
        finish(a, in: p) // its two pages in the tree, a checkpoint after the second
        let noState = seq((0..<4).map { Int32($0) } + [70, 71, 72])
        p.submit(noState)
        _ = p.schedule()
        XCTAssertEqual(noState.cachedTokens, 0, "its first page is cached, but no state was saved after it")
    }

    func testCheckpointsAreTakenFromTheLeastRecentlyUsedAndNeverFromOneAboutToLoad() throws {
        let p = try planner(pageSize: 4, sequences: 4, cache: true, states: 1)
        let a = seq(length: 6)
        p.submit(a)
        ran(p.schedule(), in: p)
        ran(p.schedule(), in: p)
        finish(a, in: p)
        XCTAssertEqual(p.cache!.statesHeld, 1)
        // b resumes at a's checkpoint (pinned) while c, admitted with it, finds none to take
        let b = seq((0..<4).map { Int32($0) } + [60, 61])
        let c = seq(length: 9, from: 200)
        p.submit(b)
        p.submit(c)
        var plan = p.schedule()
        XCTAssertEqual(plan.batch.stateLoads.count, 1)
        XCTAssertTrue(plan.batch.stateSaves.isEmpty, "the only checkpoint is b's to load")
        XCTAssertEqual(plan.entries.map(\.advance), [2, 9], "c's chunk is not cut")
        ran(plan, in: p)
        // once loaded, the same checkpoint may go to a new prompt's state
        let d = seq(length: 9, from: 300)
        p.submit(d)
        plan = p.schedule()
        XCTAssertEqual(plan.batch.stateSaves.count, 1)
        ran(plan, in: p)
        XCTAssertEqual(p.cache!.statesHeld, 1)
        XCTAssertNil(p.cache!.validate())
    }

    func testAPreemptedOrCancelledSequenceGivesItsCheckpointsBack() throws {
        let p = try planner(pageSize: 4, cache: true, states: 1)
        let a = seq(length: 10)
        p.submit(a)
        let plan = p.schedule()
        XCTAssertEqual(plan.batch.stateSaves.count, 1)
        // the pass failed or the request was cancelled before it applied: the id goes back
        a.finishedFlag = true
        a.table.releaseAll(to: p.kv)
        p.dropFinished()
        XCTAssertEqual(p.cache!.statesHeld, 0)
        XCTAssertNotNil(p.cache!.takeState(), "the id is free again")
    }
}
