import { Database } from 'bun:sqlite'
import { existsSync } from 'node:fs'
import { asc, getTableColumns, gt, sql } from 'drizzle-orm'
import { drizzle } from 'drizzle-orm/bun-sqlite'
import type { PgTable } from 'drizzle-orm/pg-core'
import { getTableConfig, type SQLiteColumn, type SQLiteTable } from 'drizzle-orm/sqlite-core'
import * as pgSchema from '../db/pg/schema'
import * as schema from '../db/schema'
import type { BlobStore } from '../lib/blobs'
import { migratePostgres, openPostgres, type PgDb, type PgTx } from '../store/postgres/db'
import { acquireInstanceLock, InstanceLockedError } from './instance-lock'

// `gridkeep migrate --to postgres://… [--storage s3://…]` (docs/api.md §12): copies a stopped SQLite
// installation's rows into an empty PostgreSQL database in one transaction (all or nothing),
// verifying every table by count and by a checksum of its rows as both engines read them, before
// the commit; with --storage, every file is first copied into the target store and checked by
// SHA-256 (and removed again if the rows fail). The source is opened read-only and never written.

export class MigrateError extends Error {}

/**
 * Every table, parents before children (PostgreSQL checks foreign keys as rows arrive). A test
 * fails if a table of the schema is missing here.
 */
export const TABLES: { name: string; sqlite: SQLiteTable; pg: PgTable }[] = [
  { name: 'users', sqlite: schema.users, pg: pgSchema.users },
  { name: 'organizations', sqlite: schema.organizations, pg: pgSchema.organizations },
  { name: 'memberships', sqlite: schema.memberships, pg: pgSchema.memberships },
  { name: 'api_keys', sqlite: schema.apiKeys, pg: pgSchema.apiKeys },
  { name: 'password_reset_tokens', sqlite: schema.passwordResetTokens, pg: pgSchema.passwordResetTokens },
  { name: 'user_identities', sqlite: schema.userIdentities, pg: pgSchema.userIdentities },
  { name: 'sso_logins', sqlite: schema.ssoLogins, pg: pgSchema.ssoLogins },
  { name: 'catalog_entries', sqlite: schema.catalogEntries, pg: pgSchema.catalogEntries },
  { name: 'serving_profiles', sqlite: schema.servingProfiles, pg: pgSchema.servingProfiles },
  { name: 'artifact_files', sqlite: schema.artifactFiles, pg: pgSchema.artifactFiles },
  { name: 'files', sqlite: schema.files, pg: pgSchema.files },
  { name: 'batches', sqlite: schema.batches, pg: pgSchema.batches },
  { name: 'batch_errors', sqlite: schema.batchErrors, pg: pgSchema.batchErrors },
  { name: 'batch_assignments', sqlite: schema.batchAssignments, pg: pgSchema.batchAssignments },
  { name: 'batch_shards', sqlite: schema.batchShards, pg: pgSchema.batchShards },
  { name: 'batch_line_index', sqlite: schema.batchLineIndex, pg: pgSchema.batchLineIndex },
  { name: 'workers', sqlite: schema.workers, pg: pgSchema.workers },
  { name: 'worker_runtimes', sqlite: schema.workerRuntimes, pg: pgSchema.workerRuntimes },
  { name: 'worker_gpus', sqlite: schema.workerGpus, pg: pgSchema.workerGpus },
  { name: 'worker_models', sqlite: schema.workerModels, pg: pgSchema.workerModels },
  { name: 'model_pulls', sqlite: schema.modelPulls, pg: pgSchema.modelPulls },
  { name: 'model_pull_failures', sqlite: schema.modelPullFailures, pg: pgSchema.modelPullFailures },
  { name: 'webhooks', sqlite: schema.webhooks, pg: pgSchema.webhooks },
  { name: 'webhook_messages', sqlite: schema.webhookMessages, pg: pgSchema.webhookMessages },
  { name: 'webhook_attempts', sqlite: schema.webhookAttempts, pg: pgSchema.webhookAttempts },
]

const CHUNK = 500

export interface TableReport {
  table: string
  rows: number
  sha256: string
}

/** The order rows are read in on both sides: `seq`, else the primary key's columns. */
function orderOf(table: SQLiteTable): string[] {
  const columns = getTableColumns(table) as Record<string, SQLiteColumn>
  if (columns.seq) return ['seq']
  const config = getTableConfig(table)
  const pk = config.primaryKeys[0]?.columns.map((c) => c.name)
  if (pk?.length) return pk
  const single = Object.values(columns).find((c) => c.primary)
  if (single) return [single.name]
  throw new MigrateError(`table ${config.name} has no order to read it in`)
}

/** JSON with object keys sorted at every depth (jsonb does not keep the order SQLite's text did). */
function canonical(value: unknown): string {
  // Bytes (the request-line index): SQLite hands back a Buffer, PostgreSQL's bytea a Uint8Array.
  if (value instanceof Uint8Array) return JSON.stringify(Buffer.from(value).toString('base64'))
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`
  if (value && typeof value === 'object') {
    const keys = Object.keys(value).sort()
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`).join(',')}}`
  }
  return JSON.stringify(value ?? null)
}

type Row = Record<string, unknown>

/** Hashes rows column by column, only the columns SQLite has (PostgreSQL has a few of its own). */
function hasher(columns: string[]) {
  const h = new Bun.CryptoHasher('sha256')
  let rows = 0
  return {
    add(row: Row) {
      rows++
      h.update(canonical(columns.map((c) => row[c])))
      h.update('\n')
    },
    done: (table: string): TableReport => ({ table, rows, sha256: h.digest('hex') }),
  }
}

const keyOf = (table: SQLiteTable) => Object.keys(getTableColumns(table))

/** Every row of a SQLite table in order, by chunks (keyset on `seq` where there is one). */
function* sqliteRows(db: ReturnType<typeof drizzle<typeof schema>>, table: SQLiteTable): Generator<Row[]> {
  const columns = getTableColumns(table) as Record<string, SQLiteColumn>
  if (!columns.seq) {
    const order = orderOf(table).map((name) => asc(Object.values(columns).find((c) => c.name === name)!))
    yield db
      .select()
      .from(table)
      .orderBy(...order)
      .all() as Row[]
    return
  }
  let after = 0
  for (;;) {
    const rows = db
      .select()
      .from(table)
      .where(gt(columns.seq, after))
      .orderBy(asc(columns.seq))
      .limit(CHUNK)
      .all() as Row[]
    if (rows.length === 0) return
    yield rows
    after = rows.at(-1)!.seq as number
  }
}

async function pgChecksum(db: PgDb | PgTx, t: (typeof TABLES)[number]): Promise<TableReport> {
  const columns = keyOf(t.sqlite)
  const h = hasher(columns)
  const pgColumns = getTableColumns(t.pg) as Record<string, { name: string }>
  const order = orderOf(t.sqlite).map((name) =>
    asc(Object.values(pgColumns).find((c) => c.name === name) as never),
  )
  let offset = 0
  for (;;) {
    const rows = (await db
      .select()
      .from(t.pg)
      .orderBy(...order)
      .limit(CHUNK * 10)
      .offset(offset)) as Row[]
    for (const r of rows) h.add(r)
    if (rows.length < CHUNK * 10) break
    offset += rows.length
  }
  return h.done(t.name)
}

export interface MigrateOptions {
  /** The SQLite installation's database file (DATABASE_PATH). */
  databasePath: string
  /** The target PostgreSQL database; must hold no gridkeep data yet. */
  to: string
  /** With --storage: the installation's file store and the target one (e.g. S3). */
  files?: { from: BlobStore; to: BlobStore }
  log?: (line: string) => void
}

export interface MigrateReport {
  tables: TableReport[]
  /** Files copied and verified (with --storage). */
  files: number
}

const sha256Of = async (stream: ReadableStream<Uint8Array>, also?: (chunk: Uint8Array) => Promise<void>) => {
  const h = new Bun.CryptoHasher('sha256')
  for await (const chunk of stream) {
    h.update(chunk)
    if (also) await also(chunk)
  }
  return h.digest('hex')
}

/**
 * Copies every file of the installation into the target store, each one verified by reading it
 * back and comparing SHA-256 and size. Returns the keys written (to remove them if the rows fail).
 */
async function copyFiles(
  ids: string[],
  from: BlobStore,
  to: BlobStore,
  log: (line: string) => void,
): Promise<string[]> {
  const written: string[] = []
  for (const id of ids) {
    const source = await from.read(id)
    if (!source) throw new MigrateError(`file ${id} has a record but no bytes in the installation's store`)
    const writer = to.create(id)
    let digest: string
    try {
      digest = await sha256Of(source, (chunk) => writer.write(chunk))
      await writer.publish()
    } catch (e) {
      await writer.abort()
      throw e
    }
    written.push(id)
    const copy = await to.read(id)
    if (!copy || (await sha256Of(copy)) !== digest || (await to.size(id)) !== (await from.size(id))) {
      throw new MigrateError(`verification failed for file ${id}: the copy differs from the original`)
    }
    if (written.length % 100 === 0) log(`copied ${written.length} of ${ids.length} files`)
  }
  log(`copied and verified ${written.length} files (SHA-256 of each)`)
  return written
}

export async function migrateRows(opts: MigrateOptions): Promise<MigrateReport> {
  const log = opts.log ?? (() => {})
  if (!existsSync(opts.databasePath)) throw new MigrateError(`no database at ${opts.databasePath}`)
  // The installation must be stopped: a server holding the lock could write while rows are read.
  let lock: ReturnType<typeof acquireInstanceLock>
  try {
    lock = acquireInstanceLock(opts.databasePath)
  } catch (e) {
    if (e instanceof InstanceLockedError)
      throw new MigrateError('the server is running on this database: stop it first')
    throw e
  }
  const sqlite = new Database(opts.databasePath, { readonly: true, strict: true })
  const source = drizzle({ client: sqlite, schema })
  const target = openPostgres({ url: opts.to, max: 2 })
  try {
    await migratePostgres(target)
    const [{ n }] = (await target.execute(sql`SELECT count(*)::int AS n FROM users`)) as unknown as [
      { n: number },
    ]
    if (n > 0)
      throw new MigrateError('the target database already holds gridkeep data: migrate into an empty one')

    // Files first: if the rows then fail, the copies are removed again and the target is as before.
    // Shards' result parts not joined yet (docs/api.md §16) are blobs too.
    const fileIds = [
      ...(source.select({ id: schema.files.id }).from(schema.files).all() as { id: string }[]).map(
        (f) => f.id,
      ),
      ...(
        source
          .select({ o: schema.batchShards.output_key, e: schema.batchShards.error_key })
          .from(schema.batchShards)
          .all() as { o: string | null; e: string | null }[]
      ).flatMap((p) => [p.o, p.e].filter((k): k is string => k !== null)),
    ]
    const copied = opts.files ? await copyFiles(fileIds, opts.files.from, opts.files.to, log) : []
    const expected: TableReport[] = []
    try {
      await target.transaction(async (tx) => {
        for (const t of TABLES) {
          const h = hasher(keyOf(t.sqlite))
          for (const rows of sqliteRows(source, t.sqlite)) {
            for (const r of rows) h.add(r)
            if (rows.length) await tx.insert(t.pg).values(rows as never)
          }
          const report = h.done(t.name)
          expected.push(report)
          if ('seq' in getTableColumns(t.pg)) {
            // New rows continue after the copied ones.
            await tx.execute(
              sql.raw(
                `SELECT setval(pg_get_serial_sequence('${t.name}', 'seq'), coalesce(max(seq), 0) + 1, false) FROM ${t.name}`,
              ),
            )
          }
          log(`copied ${t.name}: ${report.rows} rows`)
        }
        // Verified as PostgreSQL reads them back, before anything is committed: a mismatch rolls
        // the whole copy back.
        for (const want of expected) {
          const got = await pgChecksum(tx, TABLES.find((t) => t.name === want.table)!)
          if (got.rows !== want.rows || got.sha256 !== want.sha256) {
            throw new MigrateError(
              `verification failed for ${want.table}: ${want.rows} rows read, ${got.rows} in PostgreSQL (checksums ${want.sha256.slice(0, 12)} / ${got.sha256.slice(0, 12)})`,
            )
          }
        }
      })
    } catch (e) {
      for (const id of copied) await opts.files!.to.remove(id)
      throw e
    }
    log(`verified ${expected.length} tables: counts and checksums match`)
    return { tables: expected, files: copied.length }
  } finally {
    await target.$client.close()
    sqlite.close()
    lock.release()
  }
}
