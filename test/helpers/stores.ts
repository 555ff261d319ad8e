import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../../src/config'
import { migrate } from '../../src/db/migrate'
import { openDb } from '../../src/db/open'
import { manualClock } from '../../src/lib/clock'
import type { Store } from '../../src/store'
import type { ValidationResult } from '../../src/store/batches'
import { postgresStore } from '../../src/store/postgres'
import { migratePostgres, openPostgres } from '../../src/store/postgres/db'
import { sqliteStore } from '../../src/store/sqlite'
import { freshPostgresUrl } from './postgres'
import { describeWith, postgres } from './requires'

// Store tests run one suite against every engine (docs/api.md §12):
//
//   for (const [kind, open] of storeEngines) describeEngine(kind, `${kind} store`, () => { … await open() … })
//
// The PostgreSQL suites are skipped, with the reason, where its server binaries are missing.
// Each open() gives a fresh, migrated, empty database. Fixtures are plain SQL both dialects accept
// (TRUE/FALSE for booleans, '[]' for JSON, integers for timestamps).

export interface StoreHarness {
  store: Store
  exec(sql: string): Promise<void>
  one<T = Record<string, unknown>>(sql: string): Promise<T>
  all<T = Record<string, unknown>>(sql: string): Promise<T[]>
  close(): Promise<void>
}

export const storeConfig = () => loadConfig({ DATA_DIR: '/nonexistent', JWT_SECRET: 'x'.repeat(40) })

/** The store's clock: tests move it. */
export const clock = manualClock()

export const storeEngines: [string, () => Promise<StoreHarness>][] = [
  [
    'sqlite',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'gridkeep-store-'))
      const { db, sqlite } = openDb({ path: join(dir, 'g.db') })
      migrate(db)
      const store = sqliteStore({ db, sqlite, config: storeConfig(), clock })
      return {
        store,
        exec: async (sql) => void sqlite.exec(sql),
        one: async (sql) => sqlite.query(sql).get() as never,
        all: async (sql) => sqlite.query(sql).all() as never,
        close: async () => {
          await store.close()
          rmSync(dir, { recursive: true, force: true })
        },
      }
    },
  ],
  [
    'postgres',
    async () => {
      const db = openPostgres({ url: await freshPostgresUrl(), max: 16 })
      await migratePostgres(db)
      const store = postgresStore(db, storeConfig(), `inst_${crypto.randomUUID()}`, clock)
      return {
        store,
        exec: async (sql) => void (await db.$client.unsafe(sql)),
        one: async (sql) => ((await db.$client.unsafe(sql)) as unknown[])[0] as never,
        all: async (sql) => [...((await db.$client.unsafe(sql)) as unknown[])] as never,
        close: () => store.close(),
      }
    },
  ],
]

/** `describe` for one engine's suite: skipped with its reason when that engine is missing here. */
export const describeEngine = (kind: string, name: string, body: () => void) =>
  describeWith(kind === 'postgres' ? [postgres] : [], name, body)

/** SQL string literal. */
export const lit = (s: string | null) => (s === null ? 'NULL' : `'${s.replaceAll("'", "''")}'`)

/** One validation finished by itself (the store takes a group). */
export const finishOne = async (store: Store, batchId: string, result: ValidationResult, now: number) =>
  (await store.batches.finishValidations([{ batchId, result }], now))[0] ?? null
