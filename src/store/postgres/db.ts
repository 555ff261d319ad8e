import { SQL } from 'bun'
import { type BunSQLDatabase, drizzle } from 'drizzle-orm/bun-sql'
import { migrate as drizzleMigrate } from 'drizzle-orm/bun-sql/migrator'
import { type MigrationSet, withMigrationsFolder } from '../../db/migrate'
import { embeddedMigrations } from '../../db/pg/migrations.gen'
import * as schema from '../../db/pg/schema'

// PostgreSQL (docs/api.md §12) through Bun's built-in SQL client and drizzle's bun-sql driver: drizzle
// gives the typed schema (src/db/pg/schema/), drizzle-kit's migrations and its public migrator,
// and maps bigint columns to numbers (Bun's client returns them as strings); Bun's client brings
// pooling and pipelining with no extra dependency.

export type PgDb = BunSQLDatabase<typeof schema> & {
  $client: SQL
  /**
   * The poll's claim statements (src/store/postgres/queue.ts) run on connections of their own that
   * always use a prepared statement's generic plan (plan_cache_mode): left to choose, PostgreSQL
   * kept planning the claim's heads anew for the parameters at hand, at every poll, once the
   * queue's statistics had moved (planning cost more than running it; pg_stat_statements). Every
   * other statement keeps the planner's choice: drizzle's queries pass constants such as a status
   * as parameters and need plans made for them.
   */
  $claims: SQL
}
export type PgTx = Parameters<Parameters<PgDb['transaction']>[0]>[0]

// Any constant shared by every instance: pg_advisory_lock keys are 64-bit integers.
const MIGRATION_LOCK = 7_146_251_877

export interface PostgresOptions {
  url: string
  /** Connections this instance keeps open at most (a quarter of them for claims; two at least). */
  max?: number
}

export function openPostgres({ url, max = 20 }: PostgresOptions): PgDb {
  const forClaims = Math.max(1, Math.floor(max / 4))
  const client = new SQL({ url, max: Math.max(1, max - forClaims), idleTimeout: 30 })
  const claims = new SQL({
    url,
    max: forClaims,
    idleTimeout: 30,
    connection: { plan_cache_mode: 'force_generic_plan' },
  })
  return Object.assign(drizzle({ client, schema }), { $claims: claims }) as PgDb
}

/** Closes both of an instance's pools. */
export async function closePostgres(db: PgDb): Promise<void> {
  await Promise.all([db.$client.close(), db.$claims.close()])
}

/**
 * Applies the embedded PostgreSQL migrations (or the first ones of them: tests of a data migration)
 * through drizzle's public migrator, holding an advisory lock so that instances starting together
 * migrate one after the other (docs/api.md §12).
 */
export async function migratePostgres(db: PgDb, set: MigrationSet = embeddedMigrations): Promise<void> {
  // One connection holds the lock and runs the migrations, so a pool of any size (even 1) works.
  const conn = await db.$client.reserve()
  try {
    await conn`SELECT pg_advisory_lock(${MIGRATION_LOCK})`
    try {
      const onConn = drizzle({ client: conn as unknown as SQL, schema })
      await withMigrationsFolder(set, (folder) => drizzleMigrate(onConn, { migrationsFolder: folder }))
    } finally {
      await conn`SELECT pg_advisory_unlock(${MIGRATION_LOCK})`
    }
  } finally {
    conn.release()
  }
}

/**
 * Statements of one transaction sent at once on a reserved connection (one round trip). When one
 * fails, the transaction is rolled back (unless the batch ends it itself, with COMMIT: an aborted
 * transaction's COMMIT is a rollback) and the first error is thrown.
 */
export async function pipelined(conn: SQL, statements: Promise<unknown>[]): Promise<unknown[][]> {
  const sent = await Promise.allSettled(statements)
  const failed = sent.find((r) => r.status === 'rejected')
  if (!failed) return sent.map((r) => (r as PromiseFulfilledResult<unknown[]>).value)
  await conn`ROLLBACK`.catch(() => {})
  throw failed.reason
}
