import { createHash } from 'node:crypto'
import { embeddedMigrations } from './migrations.gen'
import type { Db } from './open'

/**
 * Applies the migrations embedded at build time through drizzle's own migrator (same table, same
 * hashes as `drizzle-kit migrate`), so dev, tests and the compiled binary share one path.
 */
export function migrate(db: Db): void {
  const migrations = embeddedMigrations.journal.entries.map((entry) => {
    const query = embeddedMigrations.sql[entry.tag]
    if (query === undefined) throw new Error(`migration ${entry.tag} is not embedded`)
    return {
      sql: query.split('--> statement-breakpoint'),
      bps: entry.breakpoints,
      folderMillis: entry.when,
      hash: createHash('sha256').update(query).digest('hex'),
    }
  })
  // drizzle's public migrator only reads from a folder; its dialect takes the parsed list.
  const internal = db as unknown as {
    dialect: { migrate: (m: unknown, s: unknown, c: unknown) => void }
    session: unknown
  }
  internal.dialect.migrate(migrations, internal.session, {})
}
