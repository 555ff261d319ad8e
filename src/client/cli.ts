import { readCaFile } from '../lib/tls-client'
import { type AccountContext, LOGIN_SPEC, LOGOUT_SPEC, login, logout } from './account'
import { Api, Interrupted, type Transport } from './api'
import { flag, type Parsed, parseArgs, type Spec, stringOption } from './args'
import {
  type Context,
  RESULTS_SPEC,
  results,
  STATUS_SPEC,
  SUBMIT_SPEC,
  status,
  submit,
  WAIT_SPEC,
  wait,
} from './batch'
import { type Env, resolveTarget } from './config'
import { ClientError, EXIT } from './exit'
import { AUDIT_SPEC, audit, BATCHES_SPEC, batches, FILES_SPEC, files, MODELS_SPEC, models } from './lists'
import { View } from './view'

// The terminal client's commands, dispatched by src/cli.ts beside serve, worker and the others:
// `gridkeep <login|logout|submit|wait|status|results|batches|files|models|audit> …`. Each returns its exit
// code (src/client/exit.ts); docs/guide.md "The terminal client" documents them all.

interface ClientCommand {
  summary: string
  usage: string
  spec: Spec
  /** Account commands manage the saved key; the others need one. */
  run:
    | { account: (p: Parsed, ctx: AccountContext) => Promise<number> }
    | { api: (p: Parsed, ctx: Context) => Promise<number> }
}

// The options every command takes.
const JSON_NOTE = [
  '  --json             one JSON object per line (the default when stdout is not a terminal)',
  "  --ca-file FILE     trust this CA's PEM certificate too (a lab's private CA; env GRIDKEEP_CA_FILE)",
].join('\n')
const RESULT_NOTES = [
  '  -o, --output OUT   write the output file (OpenAI batch output lines) to OUT',
  '  --errors ERR       write the error file (failed requests) to ERR',
  "  --input-order      write the lines in the input file's order, not the order the batch ran",
  '                     (downloads the input too: it must still exist)',
]

export const CLIENT_COMMANDS: Record<string, ClientCommand> = {
  login: {
    summary: 'Log in to a server and keep a personal key for this machine',
    spec: LOGIN_SPEC,
    usage: [
      'Usage: gridkeep login [--server URL] [--email EMAIL] [--password-stdin] [--name NAME]',
      '       gridkeep login [--server URL] --sso [--name NAME]',
      '       gridkeep login [--server URL] --key gk-…',
      '',
      'Asks for the email and password (on a terminal the password is not echoed; otherwise each',
      'answer is the next line of stdin). A first login that must change its password asks for a',
      'new one. Then creates a personal key named gridkeep-cli@<hostname> and saves the server and',
      'the key in $XDG_CONFIG_HOME/gridkeep/config.json (else ~/.config/gridkeep/config.json; mode',
      '0600). Logging in again replaces (and revokes) the key this machine had.',
      '',
      'Options:',
      '  --server URL       the server (default: GRIDKEEP_SERVER, the saved one, http://localhost:8080)',
      '  --email EMAIL      the account; asked when not given',
      "  --sso              sign in through the browser at the server's identity provider (single",
      '                     sign-on): the address is printed, and opened when a browser can be',
      '                     ($BROWSER, else xdg-open/open); open it on this machine where none can',
      '  --password-stdin   read the password from the first line of stdin, without a prompt (needs',
      '                     --email); a forced password change reads the new one from the next line',
      "  --name NAME        the new key's name (default: gridkeep-cli@<hostname>)",
      '  --key gk-…         save an existing personal key instead of logging in',
      JSON_NOTE,
    ].join('\n'),
    run: { account: login },
  },
  logout: {
    summary: 'Revoke the saved key and forget it',
    spec: LOGOUT_SPEC,
    usage: [
      'Usage: gridkeep logout',
      '',
      "Revokes the personal key 'gridkeep login' made (the key revokes itself) and deletes the",
      'config file. A key saved with --key is only forgotten: revoke it on the Keys page.',
      'If the server cannot be reached the key stays saved, so that logout can be run again.',
      '',
      'Options:',
      JSON_NOTE,
    ].join('\n'),
    run: { account: logout },
  },
  submit: {
    summary: 'Upload a JSONL file, create a batch, follow it (--wait) to its results',
    spec: SUBMIT_SPEC,
    usage: [
      'Usage: gridkeep submit FILE [--endpoint PATH] [--metadata KEY=VALUE]… [--wait] [-o OUT] [--errors ERR] [--input-order]',
      '',
      'Uploads FILE (streamed, with a progress bar), creates a batch from it and follows its',
      'validation: every error is printed with its line and field, and the true total. Without',
      "--wait it ends once the batch is validated (exit 0) and prints 'gridkeep wait <id>'.",
      'With --wait it follows the run (requests done of total, failed, rate, time left, shards)',
      'until the batch is completed or failed. Ctrl-C leaves the batch running.',
      '',
      'Options:',
      "  --endpoint PATH    the batch endpoint (default: the server's, /v1/chat/completions)",
      '  --metadata K=V     a metadata pair; repeatable (at most 16)',
      '  --wait             follow the batch until it is completed or failed',
      ...RESULT_NOTES,
      '                     (-o and --errors imply --wait)',
      '  --interval SECONDS how often the batch is read while it runs (default 2)',
      JSON_NOTE,
    ].join('\n'),
    run: { api: submit },
  },
  wait: {
    summary: 'Follow a batch until it is completed or failed',
    spec: WAIT_SPEC,
    usage: [
      'Usage: gridkeep wait BATCH [-o OUT] [--errors ERR] [--input-order] [--interval SECONDS]',
      '',
      'Follows the batch (validation, then the run) until it is completed or failed, then writes',
      'its files where asked. Ctrl-C stops following; the batch keeps running.',
      '',
      'Options:',
      ...RESULT_NOTES,
      '  --interval SECONDS how often the batch is read while it runs (default 2)',
      JSON_NOTE,
    ].join('\n'),
    run: { api: wait },
  },
  status: {
    summary: 'Show a batch: status, counts, shards, errors',
    spec: STATUS_SPEC,
    usage: [
      'Usage: gridkeep status BATCH',
      '',
      'Shows the batch once: status, model, endpoint, request counts, shards, tokens (of a completed',
      'batch, with the share of prompt tokens served from cache), attempts, the last error, its',
      'validation errors and its files. In JSON mode: the batch object (docs/api.md §6).',
      '',
      'Options:',
      JSON_NOTE,
    ].join('\n'),
    run: { api: status },
  },
  results: {
    summary: "Download a completed batch's output and error files",
    spec: RESULTS_SPEC,
    usage: [
      'Usage: gridkeep results BATCH [-o OUT] [--errors ERR] [--input-order]',
      '',
      'Writes the output file of a completed batch to OUT, or to stdout without -o, and its error',
      "file to ERR when asked. A batch that has not finished is exit 3 ('gridkeep wait' first).",
      'The files come in the order the batch ran (by shared prompt prefix), not the input order;',
      "each line's custom_id names its request.",
      '',
      'Options:',
      ...RESULT_NOTES,
      JSON_NOTE,
    ].join('\n'),
    run: { api: results },
  },
  batches: {
    summary: 'List your batches, newest first',
    spec: BATCHES_SPEC,
    usage: [
      'Usage: gridkeep batches [--status STATUS] [--limit N] [--after BATCH]',
      '',
      'Options:',
      '  --status STATUS    validating, validated, in_progress, completed or failed',
      '  --limit N          how many (1–100, default 20)',
      '  --after BATCH      the page after this batch (the last one listed)',
      JSON_NOTE,
    ].join('\n'),
    run: { api: batches },
  },
  files: {
    summary: 'List your files, newest first',
    spec: FILES_SPEC,
    usage: [
      'Usage: gridkeep files [--purpose batch|batch_output] [--limit N] [--after FILE]',
      '',
      'Options:',
      '  --purpose PURPOSE  batch (uploads) or batch_output (output and error files)',
      '  --limit N          how many (1–100, default 20)',
      '  --after FILE       the page after this file (the last one listed)',
      JSON_NOTE,
    ].join('\n'),
    run: { api: files },
  },
  models: {
    summary: 'List the catalogue models you may use, and which can run now',
    spec: MODELS_SPEC,
    usage: [
      'Usage: gridkeep models [--available]',
      '',
      "The catalogue ids to put in each line's body.model; 'available' means an online worker",
      'can serve the model now.',
      '',
      'Options:',
      '  --available        only the models that can run now',
      JSON_NOTE,
    ].join('\n'),
    run: { api: models },
  },
  audit: {
    summary: 'List audit log entries: who did what, when, from where',
    spec: AUDIT_SPEC,
    usage: [
      'Usage: gridkeep audit [--actor ID] [--action ACTION] [--target ID] [--target-kind KIND]',
      '                      [--org ORG] [--start TIME] [--end TIME] [--limit N] [--after ENTRY]',
      '',
      "A superadmin's key reads every entry; anyone else's the entries of the organizations they",
      'own or administer (docs/api.md §17). Newest first.',
      '',
      'Options:',
      '  --actor ID         a user id (their JWT and personal keys), a key id, system or anonymous',
      "  --action ACTION    an action (key.personal.created) or a family ('key.*', 'org.member.*')",
      '  --target ID        what the entry is about: a user, key, org, worker or file id',
      '  --target-kind KIND user, key, org, worker, file, catalogue or audit',
      '  --org ORG          one organization',
      '  --start TIME       from this time on: Unix seconds, or a date (2026-05-01) or date and time',
      '  --end TIME         before this time',
      '  --limit N          how many (1–100, default 20)',
      '  --after ENTRY      the page after this entry (the last one listed)',
      JSON_NOTE,
    ].join('\n'),
    run: { api: audit },
  },
}

const COMMON: Spec = { json: {}, help: { short: 'h' }, 'ca-file': { value: true } }

/** --ca-file (or GRIDKEEP_CA_FILE), and the clear-text warning said once per command. */
function transportOf(parsed: Parsed, env: Env, view: View): Transport {
  const caFile = stringOption(parsed, 'ca-file') ?? (env.GRIDKEEP_CA_FILE || undefined)
  let ca: string | undefined
  if (caFile !== undefined) {
    try {
      ca = readCaFile(caFile)
    } catch (e) {
      throw new ClientError(EXIT.usage, `--ca-file: ${(e as Error).message}`)
    }
  }
  let warned = false
  const warn = (text: string) => {
    if (warned) return
    warned = true
    view.warn(`warning: ${text}`)
  }
  return { ...(ca ? { ca } : {}), warn }
}

/** Runs one client command; the exit code is the command's (src/client/exit.ts). */
export async function runClientCommand(name: string, argv: string[], env: Env): Promise<number> {
  const command = CLIENT_COMMANDS[name]!
  const fail = (message: string, code: number) => {
    process.stderr.write(`gridkeep ${name}: ${message}\n`)
    return code
  }
  let parsed: Parsed
  try {
    parsed = parseArgs(argv, { ...command.spec, ...COMMON })
  } catch (e) {
    if (e instanceof ClientError) return fail(`${e.message}. Run 'gridkeep ${name} --help'.`, e.exitCode)
    throw e
  }
  if (flag(parsed, 'help')) {
    process.stdout.write(`${command.usage}\n`)
    return EXIT.ok
  }
  const view = new View(flag(parsed, 'json') || !process.stdout.isTTY)
  // Ctrl-C: the first stops what is under way (a batch keeps running; the command says how to
  // resume), a second ends the process at once.
  const interrupt = new AbortController()
  let signals = 0
  const onSignal = () => {
    if (++signals > 1) process.exit(EXIT.interrupted)
    interrupt.abort()
  }
  process.on('SIGINT', onSignal)
  try {
    const transport = transportOf(parsed, env, view)
    if ('account' in command.run)
      return await command.run.account(parsed, { env, view, interrupt: interrupt.signal, transport })
    const target = resolveTarget(env)
    const api = new Api(target.server, target.key, interrupt.signal, transport)
    return await command.run.api(parsed, { api, view })
  } catch (e) {
    if (e instanceof Interrupted) {
      view.event('interrupted', {})
      return fail('interrupted', EXIT.interrupted)
    }
    view.clearLive()
    if (!(e instanceof ClientError)) {
      view.event('error', { exit_code: EXIT.internal, message: String((e as Error)?.message ?? e) })
      return fail(`unexpected error (a bug in the client): ${(e as Error)?.stack ?? e}`, EXIT.internal)
    }
    view.event('error', { exit_code: e.exitCode, message: e.message, ...e.detail })
    const hint = e.exitCode === EXIT.usage ? `. Run 'gridkeep ${name} --help'.` : ''
    return fail(`${e.message}${hint}`, e.exitCode)
  } finally {
    process.off('SIGINT', onSignal)
  }
}
