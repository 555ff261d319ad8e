import { existsSync } from 'node:fs'
import { ConfigError, loadConfig } from '../../config'
import { openStore } from '../../deps'
import { systemClock } from '../../lib/clock'
import { newId } from '../../lib/ids'
import { appendStubs, discover } from './discover'
import { checkManifest, isMapping } from './manifest'
import { DEFAULT_CATALOGUE_PATH } from './seed'

// `gridkeep catalogue …`: the operator's side of the catalogue. `check` runs the very validation
// seeding runs (manifest.ts), so a manifest that passes here seeds without skipped entries.
// Exit codes: 0 fine, 1 violations or nothing could be done, 2 usage or unreadable input.

export const CATALOGUE_USAGE = `usage: gridkeep catalogue <command>

commands:
  check <file>                 validate a manifest (docs/api.md §4 catalogue rules 1-3, the entry schema and
                               serving-profile params); prints every violation (the entry is skipped),
                               param error (the param is left out) and warning (a param kept that
                               gridkeep does not know), and exits 1 if there is a violation or an error
  discover [--manifest PATH]   append staged stubs (enabled: false, status: unverified) for models
                               that workers report and no catalogue entry covers (docs/api.md §4 catalogue rule 8);
                               PATH defaults to CATALOGUE_PATH, else ${DEFAULT_CATALOGUE_PATH}
  --help                       show this help

discover reads the server's database: DATABASE_URL's PostgreSQL, else DATABASE_PATH / DATA_DIR.`

export interface CliIo {
  out(line: string): void
  err(line: string): void
  /** The environment discover reads its configuration from (default: process.env). */
  env?: Record<string, string | undefined>
}

const processIo: CliIo = {
  out: (line) => void process.stdout.write(`${line}\n`),
  err: (line) => void process.stderr.write(`${line}\n`),
}

/** Runs one catalogue command and returns its exit code. */
export async function catalogueCommand(argv: string[], io: CliIo = processIo): Promise<number> {
  const [command, ...rest] = argv
  if (command === '--help' || command === '-h' || command === 'help') {
    io.out(CATALOGUE_USAGE)
    return 0
  }
  if (command === 'check') {
    if (rest.length !== 1 || rest[0]!.startsWith('-')) return usage(io, 'check takes exactly one file')
    return check(rest[0]!, io)
  }
  if (command === 'discover') {
    const parsed = parseDiscoverArgs(rest)
    if ('error' in parsed) return usage(io, parsed.error)
    return discoverCommand(parsed.manifest, io)
  }
  return usage(io, command === undefined ? 'a command is required' : `unknown command "${command}"`)
}

function usage(io: CliIo, problem: string): number {
  io.err(`gridkeep catalogue: ${problem}`)
  io.err(CATALOGUE_USAGE)
  return 2
}

async function readText(path: string, io: CliIo): Promise<string | null> {
  try {
    const file = Bun.file(path)
    if (!(await file.exists())) {
      io.err(`${path}: no such file`)
      return null
    }
    return await file.text()
  } catch (e) {
    io.err(`${path}: cannot read: ${(e as Error).message}`)
    return null
  }
}

async function check(path: string, io: CliIo): Promise<number> {
  const text = await readText(path, io)
  if (text === null) return 2
  const result = checkManifest(text)
  if (!result.ok) {
    io.err(`${path}: ${result.error}`)
    return 1
  }
  const lines = [
    ...result.violations.map((v) => ({ ...v, what: v.rule === 'schema' ? 'schema' : `rule ${v.rule}` })),
    ...result.notices.map((n) => ({ ...n, what: n.level })),
  ].sort((a, b) => a.index - b.index)
  for (const l of lines)
    io.out(`${path}: models[${l.index}]${l.id === null ? '' : ` "${l.id}"`}: ${l.what}: ${l.message}`)
  const errors = result.notices.filter((n) => n.level === 'error').length
  const warnings = result.notices.length - errors
  const said = [
    ...(errors ? [`${errors} param error(s), left out of their entries`] : []),
    ...(warnings ? [`${warnings} warning(s)`] : []),
  ]
  if (result.violations.length > 0) {
    const entries = new Set(result.violations.map((v) => v.index)).size
    io.out(
      `${path}: ${[`${result.violations.length} violation(s) in ${entries} of ${result.total} entries`, ...said].join(', ')}`,
    )
    return 1
  }
  io.out(`${path}: ${errors ? '' : 'OK, '}${[`${result.total} entries, 0 violations`, ...said].join(', ')}`)
  return errors ? 1 : 0
}

function parseDiscoverArgs(args: string[]): { manifest?: string } | { error: string } {
  let manifest: string | undefined
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!
    if (a === '--manifest') {
      manifest = args[++i]
      if (!manifest) return { error: '--manifest needs a path' }
    } else if (a.startsWith('--manifest=')) {
      manifest = a.slice('--manifest='.length)
      if (!manifest) return { error: '--manifest needs a path' }
    } else {
      return { error: `unexpected argument "${a}"` }
    }
  }
  return { manifest }
}

async function discoverCommand(manifestArg: string | undefined, io: CliIo): Promise<number> {
  let config: ReturnType<typeof loadConfig>
  try {
    config = loadConfig(io.env ?? process.env)
  } catch (e) {
    if (e instanceof ConfigError) {
      io.err(`gridkeep: ${e.message}`)
      return 2
    }
    throw e
  }
  const path = manifestArg ?? config.CATALOGUE_PATH ?? DEFAULT_CATALOGUE_PATH
  if (!config.DATABASE_URL && !existsSync(config.DATABASE_PATH)) {
    io.err(`no database at ${config.DATABASE_PATH} (set DATA_DIR or DATABASE_PATH)`)
    return 2
  }
  const text = existsSync(path) ? await readText(path, io) : ''
  if (text === null) return 2
  let doc: unknown
  try {
    doc = Bun.YAML.parse(text)
  } catch (e) {
    io.err(`${path}: not valid YAML, nothing appended: ${(e as Error).message}`)
    return 1
  }
  if (doc != null && !isMapping(doc)) {
    io.err(`${path}: the manifest must be a YAML mapping with the key \`models\`; nothing appended`)
    return 1
  }

  // The server's database, whichever engine (docs/api.md §12): DATABASE_URL's PostgreSQL or the SQLite file.
  const { store } = openStore(config, newId('inst_'), systemClock)
  let found: ReturnType<typeof discover>
  try {
    await store.ready()
    found = discover(await store.catalogue.readCatalogue(), await store.fleet.reportedInventory(), doc)
  } finally {
    await store.close()
  }
  for (const u of found.unusable) io.err(`skipped "${u.name}": ${u.reason}`)
  if (found.stubs.length === 0) {
    io.out(`${path}: nothing to append; every model workers report is covered by the catalogue`)
    return 0
  }
  const appended = appendStubs(text, found.stubs)
  if (!appended.ok) {
    io.err(`${path}: ${appended.error}; nothing appended`)
    return 1
  }
  await Bun.write(path, appended.text)
  io.out(`${path}: appended ${found.stubs.length} staged stub(s) (enabled: false, status: unverified):`)
  for (const s of found.stubs) {
    const pin = s.digest ? `sha256:${s.digest.slice(0, 12)}…` : 'no digest'
    io.out(`  ${s.id}  ← ${s.runtime} "${s.runtime_model_id}", ${pin}, ${s.workers} worker(s)`)
  }
  return 0
}

if (import.meta.main) process.exit(await catalogueCommand(process.argv.slice(2)))
