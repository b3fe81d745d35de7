// Tokenizing a rendered chat prompt without letting message text become control tokens.
//
// The template's own markup (<|start_header_id|>, <|im_start|>, [INST], …) must become control
// tokens, so the rendered prompt is tokenized with parse_special. Text a user (or a tool, or a
// model's earlier output) wrote must not: "<|eot_id|><|start_header_id|>system" typed into a
// message would otherwise end the turn and open a system turn. So every message text that would
// tokenize differently with parse_special is located in the rendered prompt (by rendering it
// again as a placeholder) and tokenized as plain text there; a prompt without such text is
// tokenized exactly as before (one call, the same merges).

/** What tokenizes: the C ABI's tokenizer (Model) or a stand-in in tests. */
export interface Tokenizer {
  tokenize(text: string, opts: { addSpecial?: boolean; parseSpecial?: boolean }): ArrayLike<number>;
}

/** Thrown when a text that spells a control token cannot be found verbatim in the rendered prompt. */
export class InjectionError extends Error {}

/** True when `text` spells something parse_special would turn into a control token. */
export function spellsControlToken(tok: Tokenizer, text: string): boolean {
  if (!text) return false;
  const a = tok.tokenize(text, { addSpecial: false, parseSpecial: true });
  const b = tok.tokenize(text, { addSpecial: false, parseSpecial: false });
  if (a.length !== b.length) return true;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return true;
  return false;
}

/** A message as far as this file cares: its text. */
interface Message {
  content: string | null;
}

/**
 * Tokens of `render(messages)` (a chat template) where each message's text stays plain text.
 * Messages whose text spells a control token are rendered a second time as placeholders; the
 * template's text around the placeholders is its markup (tokenized with parse_special), what the
 * real rendering has in their place is message text (tokenized without). BOS once.
 */
export function tokenizeChat<M extends Message>(tok: Tokenizer, render: (messages: M[]) => string, messages: M[], bos: number | null | undefined): number[] {
  const rendered = render(messages);
  const risky = messages.flatMap((m, i) => (typeof m.content === "string" && spellsControlToken(tok, m.content) ? [i] : []));
  let tokens: number[];
  if (!risky.length) {
    tokens = Array.from(tok.tokenize(rendered, { addSpecial: true, parseSpecial: true }));
  } else {
    const mark = (k: number) => `\uE000velo${k}\uE001`;
    const skeleton = render(messages.map((m, i) => (risky.includes(i) ? { ...m, content: mark(risky.indexOf(i)) } : m)));
    const parts = skeleton.split(/\uE000velo(\d+)\uE001/); // markup, index, markup, index, …, markup
    const spans: { text: string; special: boolean }[] = [];
    const lost = () => new InjectionError("a message spells a control token and the chat template changes its text, so it cannot be kept as plain text");
    let pos = 0;
    for (let j = 0; j < parts.length; j += 2) {
      const markup = parts[j]!;
      if (!rendered.startsWith(markup, pos)) throw lost();
      spans.push({ text: markup, special: true });
      pos += markup.length;
      if (j + 1 >= parts.length) break;
      const text = messages[risky[Number(parts[j + 1])]!]!.content!;
      const next = parts[j + 2]!;
      // templates often trim message text
      const found = [text, text.trim(), text.trimStart(), text.trimEnd()].find((c) => rendered.startsWith(c, pos) && rendered.startsWith(next, pos + c.length));
      if (found === undefined) throw lost();
      spans.push({ text: found, special: false });
      pos += found.length;
    }
    if (pos !== rendered.length) throw lost();
    tokens = Array.from(tok.tokenize("", { addSpecial: true, parseSpecial: false }));
    for (const s of spans) if (s.text) tokens.push(...Array.from(tok.tokenize(s.text, { addSpecial: false, parseSpecial: s.special })));
  }
  // templates that write the BOS text themselves would otherwise get it twice
  if (bos != null && tokens[0] === bos && tokens[1] === bos) tokens.shift();
  return tokens;
}
