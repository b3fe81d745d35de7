// Terminal output shared by every command: colors only on a TTY (chalk detects it), errors as
// one red line on stderr, and a spinner that stays silent when stderr is not a terminal.
import { chalkStderr } from "chalk";
import ora, { type Ora } from "ora";

/** A user-facing failure: printed as one line, exit status 1 (2 for bad usage). */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
  ) {
    super(message);
  }
}

export function printError(err: unknown): number {
  const message = err instanceof Error ? err.message : String(err);
  process.stderr.write(chalkStderr.red(`velo: error: ${message.split("\n")[0]}`) + "\n");
  return err instanceof CliError ? err.exitCode : 1;
}

export function spinner(text: string): Ora {
  return ora({ text, stream: process.stderr, isSilent: process.stderr.isTTY !== true });
}

/** Runs a command body, turning any failure into the one-line error and an exit status. */
export function action<A extends unknown[]>(body: (...args: A) => Promise<void> | void): (...args: A) => Promise<void> {
  return async (...args: A) => {
    try {
      await body(...args);
    } catch (err) {
      process.exitCode = printError(err);
    }
  };
}
