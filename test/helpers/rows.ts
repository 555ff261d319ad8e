import type { Server } from '../../src/compose'
import type { Db } from '../../src/db/open'
import * as pgSchema from '../../src/db/pg/schema'
import * as sqliteSchema from '../../src/db/schema'
import { openPostgres, type PgDb } from '../../src/store/postgres/db'

// Fixtures and assertions on rows that no endpoint or store verb shows, on either engine: a test
// app's own database through drizzle, with the schema of that engine (src/db/schema on SQLite,
// src/db/pg/schema/ on PostgreSQL: same tables, same columns, rows of the same shapes).
//
// Both are typed as the SQLite handle and schema; only the awaited forms work on both engines:
//   const [row] = await rowsOf(t.deps).db.select().from(batches).where(eq(batches.id, id))
// never .get(), .all(), .run() (SQLite only).

export interface Rows {
  db: Db
  tables: typeof sqliteSchema
}

// One connection per PostgreSQL test app, kept for the life of the test process.
const pools = new WeakMap<Server, PgDb>()

/** The database of `deps` and the tables to use with it. */
export function rowsOf(deps: Server): Rows {
  if (deps.store.kind === 'sqlite') return { db: deps.db, tables: sqliteSchema }
  let pg = pools.get(deps)
  if (!pg) {
    pg = openPostgres({ url: deps.config.DATABASE_URL!, max: 1 })
    pools.set(deps, pg)
  }
  return { db: pg as unknown as Db, tables: pgSchema as unknown as typeof sqliteSchema }
}
