import pkg from '../package.json'
import { CLIENT_COMMANDS, runClientCommand } from './client/cli'
import { ConfigError, loadConfig } from './config'
import { runWorkerCommand } from './daemon/cli'
import { serve } from './index'
import { type BlobStore, BlobStoreUnavailableError, createBlobStore } from './lib/blobs'
import { catalogueCommand as runCatalogue } from './modules/catalogue/cli'
import { BackupError, backupDatabase, formatBytes } from './ops/backup'
import { configHelpText } from './ops/config-docs'
import { MigrateError, migrateRows } from './ops/migrate'

// `gridkeep <serve|worker|catalogue|backup|migrate|version>` and the terminal client's commands
// (`login`, `submit`, `wait` … in src/client): the entry point of the compiled binary (`bun run
// build` → dist/gridkeep) and of `bun run gridkeep <command>` from source. Every command returns
// its exit code; `serve` returns null and keeps the process running.

export interface Io {
  out(text: string): void
  err(text: string): void
  env: Record<string, string | undefined>
}

const processIo: Io = {
  out: (text) => void process.stdout.write(`${text}\n`),
  err: (text) => void process.stderr.write(`${text}\n`),
  env: process.env,
}

type Command = (argv: string[], io: Io) => Promise<number | null>

const SERVER_COMMANDS: Record<string, { summary: string; run: Command }> = {
  serve: { summary: 'Run the server (the default when no command is given)', run: serveCommand },
  worker: { summary: 'Run the reference worker daemon on a GPU machine', run: workerCommand },
  catalogue: { summary: 'Work with the model catalogue', run: catalogueCommand },
  backup: { summary: 'Write a consistent copy of the database while the server runs', run: backupCommand },
  migrate: { summary: 'Copy a stopped SQLite installation into PostgreSQL', run: migrateCommand },
  version: { summary: 'Print the gridkeep and Bun versions', run: versionCommand },
}

/** The terminal client (src/client): a user's batches from the shell. */
const CLIENT: Record<string, { summary: string; run: Command }> = Object.fromEntries(
  Object.entries(CLIENT_COMMANDS).map(([name, c]) => [
    name,
    { summary: c.summary, run: (argv: string[], io: Io) => runClientCommand(name, argv, io.env) },
  ]),
)

const COMMANDS = { ...SERVER_COMMANDS, ...CLIENT }

const isHelp = (arg: string | undefined) => arg === '--help' || arg === '-h'

export async function main(argv: string[], io: Io = processIo): Promise<number | null> {
  const [first, ...rest] = argv
  if (first === undefined || first.startsWith('-')) {
    if (isHelp(first) || first === 'help') return usage(io)
    if (first === '--version' || first === '-v') return versionCommand([], io)
    return serveCommand(argv, io)
  }
  if (first === 'help') {
    const topic = rest[0]
    return topic && COMMANDS[topic] ? COMMANDS[topic].run(['--help'], io) : usage(io)
  }
  const command = COMMANDS[first]
  if (!command) {
    io.err(`gridkeep: unknown command '${first}'. Run 'gridkeep --help' for the list.`)
    return 2
  }
  return command.run(rest, io)
}

function usage(io: Io): number {
  const width = Math.max(...Object.keys(COMMANDS).map((c) => c.length)) + 4
  const list = (commands: typeof COMMANDS) =>
    Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}${c.summary}`)
  io.out(
    [
      `gridkeep ${pkg.version} — self-hosted control plane for batch LLM inference`,
      '',
      'Usage: gridkeep [command] [options]',
      '',
      'Server and operators:',
      ...list(SERVER_COMMANDS),
      '',
      'Your batches, from the terminal (GRIDKEEP_SERVER, GRIDKEEP_API_KEY, or gridkeep login):',
      ...list(CLIENT),
      '',
      "Run 'gridkeep <command> --help' for a command's options.",
      "The server is configured by environment variables: 'gridkeep serve --help' lists them.",
    ].join('\n'),
  )
  return 0
}

async function serveCommand(argv: string[], io: Io): Promise<number | null> {
  if (isHelp(argv[0])) {
    io.out(
      [
        'Usage: gridkeep serve',
        '',
        'Starts the HTTP API. On first start it creates the database (migrations are built in),',
        'the superadmin account and the JWT secret. SIGTERM or SIGINT stops it gracefully: no new',
        'connections, in-flight requests finish, event streams end, the database is closed, exit 0.',
        'Only one server may use a database file at a time.',
        '',
        'Configuration (environment variables):',
        configHelpText(),
      ].join('\n'),
    )
    return 0
  }
  if (argv.length > 0) {
    io.err(
      `gridkeep serve: unexpected argument '${argv[0]}' (configure the server with environment variables)`,
    )
    return 2
  }
  await serve(io.env)
  return null
}

async function backupCommand(argv: string[], io: Io): Promise<number> {
  if (isHelp(argv[0])) {
    io.out(
      [
        'Usage: gridkeep backup <path> [--force]',
        '',
        'Writes a consistent copy of the database (DATABASE_PATH, from the same environment as the',
        'server) to <path>. Safe while the server runs: the copy is one snapshot and writers are not',
        'blocked. The copy is checked (PRAGMA quick_check) and written with mode 0600.',
        '',
        'Options:',
        '  --force    overwrite <path> if it already exists',
        '',
        'Restore: stop the server, delete DATABASE_PATH-wal and DATABASE_PATH-shm if present, copy',
        'the backup over DATABASE_PATH, start the server.',
      ].join('\n'),
    )
    return 0
  }
  const force = argv.includes('--force') || argv.includes('-f')
  const unknown = argv.find((a) => a.startsWith('-') && a !== '--force' && a !== '-f')
  const paths = argv.filter((a) => !a.startsWith('-'))
  if (unknown || paths.length !== 1) {
    io.err(
      unknown
        ? `gridkeep backup: unknown option '${unknown}'`
        : 'gridkeep backup: name exactly one backup file: gridkeep backup <path> [--force]',
    )
    return 2
  }
  try {
    const config = loadConfig(io.env)
    const { path, bytes } = backupDatabase(config.DATABASE_PATH, paths[0]!, { force })
    io.out(`backup written: ${path} (${formatBytes(bytes)}, ${bytes} bytes)`)
    return 0
  } catch (error) {
    if (error instanceof ConfigError || error instanceof BackupError) {
      io.err(`gridkeep backup: ${error.message}`)
      return 1
    }
    throw error
  }
}

async function migrateCommand(argv: string[], io: Io): Promise<number> {
  if (isHelp(argv[0])) {
    io.out(
      [
        'Usage: gridkeep migrate --to postgres://user:password@host:5432/db [--storage s3://bucket/prefix]',
        '',
        'Copies a stopped SQLite installation (DATABASE_PATH, from the same environment as the',
        'server) into an empty PostgreSQL database: every row, in one transaction, then verified',
        'table by table (row counts and checksums) before it is committed. The SQLite database is',
        'opened read-only and never changed. With --storage, every file is also copied into that',
        'bucket (credentials from S3_ENDPOINT, S3_REGION, S3_ACCESS_KEY_ID, S3_SECRET_ACCESS_KEY) and',
        'checked by SHA-256. Then start the servers with DATABASE_URL (and STORAGE_URL) set to them.',
      ].join('\n'),
    )
    return 0
  }
  const option = (name: string) => {
    const at = argv.indexOf(name)
    return at >= 0 ? { at, value: argv[at + 1] } : undefined
  }
  const to = option('--to')
  const storage = option('--storage')
  const used = new Set([to, storage].flatMap((o) => (o ? [o.at, o.at + 1] : [])))
  const rest = argv.filter((_, i) => !used.has(i))
  if (!to?.value || (storage && !storage.value) || rest.length) {
    io.err(
      rest.length
        ? `gridkeep migrate: unknown argument '${rest[0]}'`
        : 'gridkeep migrate: name the target: gridkeep migrate --to postgres://… [--storage s3://…]',
    )
    return 2
  }
  const secrets: string[] = []
  try {
    const env = { ...io.env, DATABASE_URL: undefined, STORAGE_URL: undefined }
    const config = loadConfig(env)
    const target = loadConfig({ ...env, DATABASE_URL: to.value, JWT_SECRET: 'x'.repeat(32) }).DATABASE_URL!
    secrets.push(new URL(target).password)
    let files: { from: BlobStore; to: BlobStore } | undefined
    if (storage?.value) {
      const into = createBlobStore(loadConfig({ ...env, STORAGE_URL: storage.value }))
      await into.prepare()
      files = { from: createBlobStore(config), to: into }
    }
    await migrateRows({ databasePath: config.DATABASE_PATH, to: target, files, log: (line) => io.out(line) })
    io.out(
      `done: start the servers with DATABASE_URL${files ? ' and STORAGE_URL' : ''} set to the targets (and the same JWT_SECRET)`,
    )
    return 0
  } catch (error) {
    const known =
      error instanceof ConfigError ||
      error instanceof MigrateError ||
      error instanceof BlobStoreUnavailableError
    let message = error instanceof Error ? error.message : String(error)
    for (const secret of secrets) if (secret) message = message.replaceAll(secret, '***')
    if (known) message = message.replace(/DATABASE_URL/g, '--to').replace(/STORAGE_URL/g, '--storage')
    io.err(`gridkeep migrate: ${message}`)
    return 1
  }
}

async function versionCommand(_argv: string[], io: Io): Promise<number> {
  io.out(`gridkeep ${pkg.version} (bun ${Bun.version})`)
  return 0
}

async function workerCommand(argv: string[], io: Io): Promise<number> {
  return runWorkerCommand(argv, io.env)
}

async function catalogueCommand(argv: string[], io: Io): Promise<number> {
  return runCatalogue(argv, io)
}

if (import.meta.main) {
  const code = await main(process.argv.slice(2))
  if (code !== null) process.exit(code)
}
