import { Database } from 'bun:sqlite'
import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import { drizzle } from 'drizzle-orm/bun-sqlite'
import * as schema from './schema'

export type Db = ReturnType<typeof drizzle<typeof schema>>

export interface OpenDbOptions {
  path: string // ':memory:' for a throwaway database
  synchronous?: 'normal' | 'full'
}

/** Opens the database with the pragmas every connection needs (ARCHITECTURE.md "The storage seam"). */
export function openDb({ path, synchronous = 'normal' }: OpenDbOptions): { db: Db; sqlite: Database } {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
  const sqlite = new Database(path, { create: true, strict: true })
  // busy_timeout first: the WAL switch itself needs the lock when another process holds it.
  sqlite.exec('PRAGMA busy_timeout = 5000')
  sqlite.exec('PRAGMA journal_mode = WAL')
  // NORMAL is durable against process crashes in WAL mode; FULL also against power loss.
  sqlite.exec(`PRAGMA synchronous = ${synchronous === 'full' ? 'FULL' : 'NORMAL'}`)
  sqlite.exec('PRAGMA foreign_keys = ON')
  sqlite.exec('PRAGMA temp_store = MEMORY')
  return { db: drizzle({ client: sqlite, schema }), sqlite }
}
