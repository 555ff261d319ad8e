// The exit codes of the terminal client, one per kind of outcome, so a script can tell them apart
// (docs/guide.md "The terminal client" lists them). 2 is bad usage, as for every gridkeep command.

export const EXIT = {
  /** Done: the command did what it was asked; for a wait, the batch completed. */
  ok: 0,
  /** The batch failed: it ran out of attempts (docs/api.md §6 Batch states). */
  batchFailed: 1,
  /** Unknown command or option, a missing argument, a prompt with no answer. */
  usage: 2,
  /** The input was refused: validation errors, or a 4xx other than 401/403 (a file the server
   *  rejects, an unknown batch id, results of a batch that has not finished). */
  invalid: 3,
  /** Not logged in, or the server refused the credential (401) or the action (403). */
  auth: 4,
  /** The server could not be reached, or did not answer in time. */
  unreachable: 5,
  /** The server failed (5xx), is limiting the caller (429), or gave an answer that is not the API's. */
  server: 6,
  /** A bug in the client itself (EX_SOFTWARE): the message says where. */
  internal: 70,
  /** Ctrl-C (128 + SIGINT): a batch already created keeps running. */
  interrupted: 130,
} as const

export type ExitCode = (typeof EXIT)[keyof typeof EXIT]

/** A failure the client reports in one line and turns into its exit code. */
export class ClientError extends Error {
  constructor(
    readonly exitCode: ExitCode,
    message: string,
    /** What a script reading the JSON lines gets besides the message (status, code, batch_id …). */
    readonly detail: Record<string, unknown> = {},
  ) {
    super(message)
  }
}

export const usageError = (message: string) => new ClientError(EXIT.usage, message)

/** The exit code of an HTTP answer that is not 2xx. */
export function exitCodeOfStatus(status: number): ExitCode {
  if (status === 401 || status === 403) return EXIT.auth
  if (status === 429 || status >= 500) return EXIT.server
  if (status >= 400) return EXIT.invalid
  return EXIT.server
}
