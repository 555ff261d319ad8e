import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { migrate as drizzleMigrate } from 'drizzle-orm/bun-sqlite/migrator'
import { embeddedMigrations } from './migrations.gen'
import type { Db } from './open'

export type MigrationSet = typeof embeddedMigrations

/**
 * Applies the migrations embedded at build time through drizzle's public migrator (same table,
 * same hashes as `drizzle-kit migrate`), so dev, tests and the compiled binary share one path.
 * The migrator reads a folder, so the embedded set is written to a private temporary one first:
 * the compiled binary carries no drizzle/ folder of its own.
 */
export function migrate(db: Db, set: MigrationSet = embeddedMigrations): void {
  const folder = mkdtempSync(join(tmpdir(), 'gridkeep-migrations-'))
  try {
    mkdirSync(join(folder, 'meta'))
    writeFileSync(join(folder, 'meta', '_journal.json'), JSON.stringify(set.journal))
    for (const entry of set.journal.entries) {
      const sql = set.sql[entry.tag]
      if (sql === undefined) throw new Error(`migration ${entry.tag} is not embedded`)
      writeFileSync(join(folder, `${entry.tag}.sql`), sql)
    }
    drizzleMigrate(db, { migrationsFolder: folder })
  } finally {
    rmSync(folder, { recursive: true, force: true })
  }
}
