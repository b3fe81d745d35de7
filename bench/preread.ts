// Loading's page-cache phase (cli/load.ts touchPages) against the read loop it replaced (the
// file streamed through Bun.file().stream(), every byte copied into JS): milliseconds for a
// file already in the page cache, ROUNDS alternating rounds, medians.
//
//   node_modules/bun/bin/bun.exe bench/preread.ts FILE [ROUNDS=5]
import { touchPages } from "../cli/load";

const file = process.argv[2];
if (!file) throw new Error("usage: bench/preread.ts FILE [ROUNDS]");
const rounds = Number(process.argv[3] ?? 5);

async function streamed(): Promise<number> {
  const reader = Bun.file(file!).stream().getReader();
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return n;
    n += value.length;
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const touch: number[] = [], read: number[] = [];
touchPages(file); // warm-up: the file in the page cache
for (let r = 0; r < rounds; r++) {
  let t = performance.now();
  touchPages(file);
  touch.push(performance.now() - t);
  t = performance.now();
  await streamed();
  read.push(performance.now() - t);
}
const size = Bun.file(file).size;
console.log(`${file}: ${(size / 2 ** 20).toFixed(0)} MiB, ${rounds} rounds`);
console.log(`touchPages ${median(touch).toFixed(0)} ms (${touch.map((x) => x.toFixed(0)).join(", ")})`);
console.log(`stream     ${median(read).toFixed(0)} ms (${read.map((x) => x.toFixed(0)).join(", ")})`);
console.log(`ratio ${(median(read) / median(touch)).toFixed(2)}x`);
