import { Database } from 'bun:sqlite'
import { expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { migrate } from '../../src/db/migrate'
import { openDb } from '../../src/db/open'
import * as retention from '../../src/services/retention'
import * as sweeper from '../../src/services/sweeper'
import { startTestServer } from '../helpers/app'

// Issue 6: a server with a million batches must start as fast as an empty one, so nothing run at
// start (migrations, seeding, the first pass of the background loops) may walk a table that grows
// with use. Every statement prepared while the server starts is recorded and its query plan read:
// a `SCAN` of such a table (with or without an index: a full index walk is still O(n)) fails.

// Tables that grow with every batch. (Users and keys grow with people, a lab's few hundred; the
// first-start superadmin check reads users with LIMIT 1.)
const GROWING = ['batches', 'batch_errors', 'batch_assignments', 'files']

test('no statement run at startup scans a table that grows with use', async () => {
  const seen = new Set<string>()
  const proto = Database.prototype as unknown as Record<
    'prepare' | 'query',
    (sql: string, ...a: unknown[]) => unknown
  >
  const original = { prepare: proto.prepare, query: proto.query }
  for (const name of ['prepare', 'query'] as const) {
    proto[name] = function (this: Database, sql: string, ...rest: unknown[]) {
      seen.add(sql)
      return original[name].call(this, sql, ...rest)
    }
  }
  try {
    // SQLite's query plans: this server stays on SQLite in the PostgreSQL run.
    const server = await startTestServer({ DATABASE_URL: '' })
    // The first pass of each timed loop, as its timer would run it (past the sweeper's startup
    // grace, so that the sweep itself runs); stop() then waits for what the start set going on
    // by itself (the validator's recovery of batches left validating) and for every loop.
    server.clock.advance(server.config.HEARTBEAT_TIMEOUT_SECONDS + 1)
    expect((await sweeper.runOnce(server.deps)).skipped).toBeNull()
    await retention.runOnce(server.deps)
    await server.stop()
  } finally {
    proto.prepare = original.prepare
    proto.query = original.query
  }
  const statements = [...seen].filter((sql) => /^\s*(select|update|delete|insert|with)\b/i.test(sql))
  expect(statements.length).toBeGreaterThan(0)
  // The plans are read on a database of the same schema (the server's is gone with it).
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-scan-'))
  const { db, sqlite } = openDb({ path: join(dir, 'g.db') })
  try {
    migrate(db)
    const scans: string[] = []
    for (const sql of statements) {
      const plan = sqlite.query(`EXPLAIN QUERY PLAN ${sql}`).all() as { detail: string }[]
      for (const { detail } of plan) {
        const table = /^SCAN (\w+)/.exec(detail)?.[1]
        if (table && GROWING.includes(table)) scans.push(`${detail} ← ${sql}`)
      }
    }
    expect(scans).toEqual([])
  } finally {
    sqlite.close()
    rmSync(dir, { recursive: true, force: true })
  }
})
