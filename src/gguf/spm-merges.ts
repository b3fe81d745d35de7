// BPE merges for a SentencePiece vocabulary, for tokenizers that llama.cpp runs as BPE over
// SentencePiece-style pieces (Gemma 4's "gemma4": spaces as U+2581, <0xXX> byte fallback, a
// merge list). tests/data has no Gemma 4 vocabulary, so synth.ts derives one from the llama-spm
// vocabulary with these merges, made the way Hugging Face's SentencePiece-to-BPE conversion
// (convert_slow_tokenizer's SentencePieceExtractor) makes them: every split of a token into two
// tokens of the vocabulary is a merge.

/**
 * "left right" for every token and every split of it (at a code point, as Python slices a str)
 * into two tokens that are both in the vocabulary; ordered by the merged token's id, then the
 * left's id, then the right's (the extractor's order when it sorts by id). A (left, right) pair
 * spells one string, so it comes once; a repeated token text counts at its first id. Pairs with
 * a space in them are left out: llama.cpp cuts a merge at its first space after the first byte.
 */
export function spmMerges(tokens: readonly string[]): string[] {
  const ids = new Map<string, number>();
  tokens.forEach((t, i) => { if (!ids.has(t)) ids.set(t, i); });
  const merges: string[] = [];
  for (const text of ids.keys()) { // first occurrences, in id order
    const splits: [number, number, string][] = [];
    let at = 0;
    for (const ch of text) {
      at += ch.length; // UTF-16 units of one code point
      if (at === text.length) break;
      const left = text.slice(0, at), right = text.slice(at);
      const l = ids.get(left), r = ids.get(right);
      if (l !== undefined && r !== undefined && !left.includes(" ") && !right.includes(" ")) splits.push([l, r, `${left} ${right}`]);
    }
    splits.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    for (const s of splits) merges.push(s[2]);
  }
  return merges;
}
