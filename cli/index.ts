#!/usr/bin/env bun
// Velo's command line: this file only registers the commands (one file each in commands/).
import { Command, CommanderError } from "commander";
import pkg from "../package.json" with { type: "json" };
import { benchCommand } from "./commands/bench";
import { chatCommand } from "./commands/chat";
import { embedCommand } from "./commands/embed";
import { generateCommand } from "./commands/generate";
import { lsCommand } from "./commands/ls";
import { pullCommand } from "./commands/pull";
import { rmCommand } from "./commands/rm";
import { serveCommand } from "./commands/serve";
import { tokenizeCommand } from "./commands/tokenize";
import { printError } from "./ui";

const program = new Command("velo")
  .description("Velo: run open LLMs locally from GGUF files")
  .version(`velo ${pkg.version}`, "-v, --version", "print the version")
  .showSuggestionAfterError()
  .configureOutput({ outputError: () => {} }) // errors are printed once, by printError
  .exitOverride();

program.addCommand(generateCommand());
program.addCommand(chatCommand());
program.addCommand(benchCommand());
program.addCommand(serveCommand());
program.addCommand(tokenizeCommand());
program.addCommand(embedCommand());
program.addCommand(pullCommand());
program.addCommand(lsCommand());
program.addCommand(rmCommand());
for (const c of program.commands) c.exitOverride().configureOutput({ outputError: () => {} });

try {
  await program.parseAsync(process.argv);
} catch (err) {
  if (err instanceof CommanderError) {
    // --help and --version end here too, with exit code 0
    if (err.exitCode !== 0) process.exitCode = printError(new Error(err.message.replace(/^error: /, "")));
  } else {
    process.exitCode = printError(err);
  }
}
