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
  withMigrationsFolder(set, (folder) => drizzleMigrate(db, { migrationsFolder: folder }))
}

/** Writes an embedded migration set where drizzle's migrator can read it, for the length of `fn`. */
export function withMigrationsFolder<T>(set: MigrationSet, fn: (folder: string) => T): T {
  const folder = mkdtempSync(join(tmpdir(), 'gridkeep-migrations-'))
  let result: T | undefined
  try {
    mkdirSync(join(folder, 'meta'))
    writeFileSync(join(folder, 'meta', '_journal.json'), JSON.stringify(set.journal))
    for (const entry of set.journal.entries) {
      const sql = set.sql[entry.tag]
      if (sql === undefined) throw new Error(`migration ${entry.tag} is not embedded`)
      writeFileSync(join(folder, `${entry.tag}.sql`), sql)
    }
    result = fn(folder)
    return result
  } finally {
    // An async migrator reads the folder until its promise settles.
    const done = () => rmSync(folder, { recursive: true, force: true })
    if (result instanceof Promise) result.then(done, done)
    else done()
  }
}
