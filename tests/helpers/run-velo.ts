// runVelo (bench/llamacpp/reference.ts) in a fresh process, its runs as JSON on stdout: for tests
// that need the engine under switches it reads once from its environment (VELO_GPU_NO_DOT).
//   bun tests/helpers/run-velo.ts MODEL '[[1,2,3],[1,4]]' '{"nGen":24,"top":10,"backend":"vulkan"}'
import { runVelo } from "../../bench/llamacpp/reference";

const [file, promptsJson, optionsJson] = process.argv.slice(2);
console.log(JSON.stringify(await runVelo(file!, JSON.parse(promptsJson!) as number[][], JSON.parse(optionsJson ?? "{}"))));
