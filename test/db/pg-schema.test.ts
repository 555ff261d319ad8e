import { describe, expect, test } from 'bun:test'
import { cpSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { PgTable, getTableConfig as pgTableConfig } from 'drizzle-orm/pg-core'
import { SQLiteTable, getTableConfig as sqliteTableConfig } from 'drizzle-orm/sqlite-core'
import { embeddedMigrations } from '../../src/db/pg/migrations.gen'
import * as pg from '../../src/db/pg/schema'
import * as sqlite from '../../src/db/schema'

// The PostgreSQL schema is SQLite's twin (docs/api.md §12): same tables, same columns, same indexes,
// plus the tables only several instances need.
const POSTGRES_ONLY = new Set(['maintenance_runs', 'rate_limit_hits'])
const POSTGRES_ONLY_COLUMNS: Record<string, string[]> = {
  batches: ['validation_holder', 'validation_lease_until'],
}
// The claim's probe of the open assignments that hold no slot (src/store/postgres/queue.ts claimOne):
// on SQLite, whose claims take turns, every assignment holds none and nothing asks.
const POSTGRES_ONLY_INDEXES: Record<string, string[]> = {
  batch_assignments: ['batch_assignments_slotless'],
}

const shape = <T>(
  tables: T[],
  config: (t: T) => { name: string; columns: { name: string }[]; indexes: unknown[] },
) =>
  Object.fromEntries(
    tables.map((t) => {
      const c = config(t)
      const extra = POSTGRES_ONLY_INDEXES[c.name] ?? []
      const indexes = (c.indexes as { config: { name: string } }[]).filter(
        (i) => !extra.includes(i.config.name),
      )
      return [c.name, { columns: c.columns.map((col) => col.name).sort(), indexes: indexes.length }]
    }),
  )

describe('PostgreSQL schema and migrations', () => {
  test('the same tables and columns as the SQLite schema', () => {
    const pgTables = (Object.values(pg) as unknown[]).filter((t): t is PgTable => t instanceof PgTable)
    const sqliteTables = (Object.values(sqlite) as unknown[]).filter(
      (t): t is SQLiteTable => t instanceof SQLiteTable,
    )
    const pgShape = shape(pgTables, pgTableConfig)
    for (const name of POSTGRES_ONLY) delete pgShape[name]
    for (const [table, columns] of Object.entries(POSTGRES_ONLY_COLUMNS)) {
      const t = pgShape[table]!
      t.columns = t.columns.filter((c) => !columns.includes(c))
    }
    expect(pgShape).toEqual(shape(sqliteTables, sqliteTableConfig))
  })

  test('the embedded migrations are exactly the files drizzle-kit wrote', () => {
    const journal = JSON.parse(readFileSync('drizzle/postgres/meta/_journal.json', 'utf8'))
    expect(embeddedMigrations.journal).toEqual(journal)
    const onDisk = readdirSync('drizzle/postgres').filter((f) => f.endsWith('.sql'))
    expect(Object.keys(embeddedMigrations.sql).map((tag) => `${tag}.sql`)).toEqual(onDisk.sort())
    for (const [tag, text] of Object.entries(embeddedMigrations.sql)) {
      expect(text).toBe(readFileSync(`drizzle/postgres/${tag}.sql`, 'utf8'))
    }
  })

  test('the migrations match the schema (drizzle-kit has nothing left to generate)', () => {
    const out = `data/.pg-migration-check-${process.pid}`
    rmSync(out, { recursive: true, force: true })
    cpSync('drizzle/postgres', out, { recursive: true })
    try {
      const run = Bun.spawnSync(
        [
          'bun',
          'x',
          'drizzle-kit',
          'generate',
          '--dialect',
          'postgresql',
          '--schema',
          './src/db/pg/schema/index.ts',
          '--out',
          out,
        ],
        { stdout: 'pipe', stderr: 'pipe' },
      )
      expect(run.stdout.toString() + run.stderr.toString()).toContain('No schema changes')
    } finally {
      rmSync(out, { recursive: true, force: true })
    }
  })
})
