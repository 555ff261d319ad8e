import { expect, test } from 'bun:test'
import { readFileSync, rmSync } from 'node:fs'
import { SQL } from 'bun'
import { getTableConfig, SQLiteTable } from 'drizzle-orm/sqlite-core'
import { main } from '../../src/cli'
import * as pgSchema from '../../src/db/pg/schema'
import * as schema from '../../src/db/schema'
import { acquireInstanceLock } from '../../src/ops/instance-lock'
import { MigrateError, migrateRows, TABLES } from '../../src/ops/migrate'
import { makeTestApp } from '../helpers/app'
import { populate } from '../helpers/installation'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'

// `gridkeep migrate` (docs/api.md §12): a stopped SQLite installation's rows, copied into PostgreSQL
// and verified; the source never written.

const sha = (path: string) => new Bun.CryptoHasher('sha256').update(readFileSync(path)).digest('hex')

describeWith(postgres, 'migrateRows', () => {
  test('every table of the schema is copied, parents first', () => {
    const sqliteTables = (Object.values(schema) as unknown[])
      .filter((t): t is SQLiteTable => t instanceof SQLiteTable)
      .map((t) => getTableConfig(t).name)
    expect(TABLES.map((t) => t.name).sort()).toEqual(sqliteTables.sort())
    expect(Object.keys(pgSchema).length).toBeGreaterThan(TABLES.length)
  })

  test('a populated installation: every row copied and verified, the source unchanged, sequences continue', async () => {
    const t = makeTestApp({ DATABASE_URL: '' })
    try {
      await populate(t)
      await t.deps.store.close()
      const path = t.config.DATABASE_PATH
      const before = sha(path)
      const to = await freshPostgresUrl()
      const lines: string[] = []
      const report = await migrateRows({ databasePath: path, to, log: (l) => lines.push(l) })
      expect(sha(path)).toBe(before)
      const rows = Object.fromEntries(report.tables.map((r) => [r.table, r.rows]))
      expect(rows).toMatchObject({
        users: 2,
        organizations: 3,
        memberships: 4,
        batches: 4,
        batch_assignments: 1,
        workers: 3,
        // docs/api.md §16: the split batch's two shards and its request-line index.
        batch_shards: 2,
        batch_line_index: 1,
        model_pull_failures: 1,
      })
      expect(rows.files).toBe(6) // four inputs, one output, one error file
      expect(rows.batch_errors).toBeGreaterThan(0)
      expect(rows.api_keys).toBe(2)
      // The webhook, and its outbox: its owner's batch was validated, then completed.
      expect(rows.webhooks).toBe(1)
      expect(rows.webhook_messages).toBe(2)
      // docs/api.md §2 "Single sign-on": the linked identity travels, so it still signs in.
      expect(rows.user_identities).toBe(1)
      expect(rows.sso_logins).toBe(1)
      expect(lines.at(-1)).toMatch(/^verified 25 tables/)
      const pg = new SQL({ url: to, max: 1 })
      try {
        const [u] = await pg`SELECT count(*)::int AS n, max(seq)::int AS max FROM users`
        expect(u.n).toBe(2)
        // A new row continues after the copied ones.
        const [next] =
          await pg`INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_new', 'n', false, 1) RETURNING seq::int`
        const [max] = await pg`SELECT max(seq)::int AS m FROM organizations WHERE id <> 'org_new'`
        expect(next.seq).toBe(max.m + 1)
        // JSON columns arrive as JSON values that SQL sees into, not as strings of their text.
        const [json] = await pg`SELECT
          (SELECT array_agg(DISTINCT jsonb_typeof(metadata)) FROM batches WHERE metadata IS NOT NULL) AS metadata,
          (SELECT array_agg(DISTINCT jsonb_typeof(usage)) FROM batches WHERE usage IS NOT NULL) AS usage,
          (SELECT array_agg(DISTINCT jsonb_typeof(capabilities)) FROM catalog_entries) AS capabilities,
          (SELECT array_agg(DISTINCT jsonb_typeof(params)) FROM serving_profiles) AS params,
          (SELECT array_agg(DISTINCT jsonb_typeof(loaded_models)) FROM workers) AS loaded_models,
          (SELECT metadata ->> 'project' FROM batches WHERE metadata IS NOT NULL LIMIT 1) AS project,
          (SELECT sum((usage ->> 'cached_tokens')::int)::int FROM batches) AS batch_cached,
          (SELECT sum((usage ->> 'cached_tokens')::int)::int FROM batch_shards) AS shard_cached`
        expect(json).toEqual({
          metadata: ['object'],
          usage: ['object'],
          capabilities: ['object'],
          params: ['object'],
          loaded_models: ['array'],
          project: 'migrate',
          // docs/api.md §14 cached prompt tokens: the completed batch's two answered lines, and the
          // done shard's 125 (3 each, test/helpers/installation.ts).
          batch_cached: 6,
          shard_cached: 375,
        })
      } finally {
        await pg.close()
      }
      // A second run refuses a target that already holds data, and changes nothing.
      await expect(migrateRows({ databasePath: path, to })).rejects.toThrow(/already holds gridkeep data/)
    } finally {
      rmSync(t.config.DATA_DIR, { recursive: true, force: true })
    }
  })

  test('a running installation is refused', async () => {
    const t = makeTestApp({ DATABASE_URL: '' })
    const lock = acquireInstanceLock(t.config.DATABASE_PATH)
    try {
      await expect(
        migrateRows({ databasePath: t.config.DATABASE_PATH, to: await freshPostgresUrl() }),
      ).rejects.toThrow(MigrateError)
    } finally {
      lock.release()
      t.close()
    }
  })
})

describeWith(postgres, 'gridkeep migrate (command)', () => {
  const run = async (argv: string[], env: Record<string, string> = {}) => {
    const out: string[] = []
    const err: string[] = []
    const code = await main(['migrate', ...argv], {
      out: (l) => out.push(l),
      err: (l) => err.push(l),
      env: { DATA_DIR: '/nonexistent/gridkeep', ...env },
    })
    return { code, out: out.join('\n'), err: err.join('\n') }
  }

  test('usage errors exit 2; a bad target or a missing database exit 1 in one line, no password', async () => {
    expect((await run([])).code).toBe(2)
    expect((await run(['--to'])).code).toBe(2)
    expect((await run(['--to', 'postgres://h/x', '--storage'])).code).toBe(2)
    const bad = await run(['--to', 'mysql://u:hunter2-db@h/x'])
    expect(bad.code).toBe(1)
    expect(bad.err).toMatch(/^gridkeep migrate: .*--to: expected a postgres/)
    expect(bad.err).not.toContain('hunter2')
    const missing = await run(['--to', 'postgres://u:hunter2-db@127.0.0.1:1/x'])
    expect(missing.code).toBe(1)
    expect(missing.err).toMatch(/no database at/)
    const storage = await run(['--to', 'postgres://u:hunter2-db@127.0.0.1:1/x', '--storage', 'gs://bucket'])
    expect(storage.code).toBe(1)
    expect(storage.err).toMatch(/^gridkeep migrate: .*--storage/)
    expect(storage.err).not.toContain('hunter2')
    expect((await run(['--help'])).out).toContain('Usage: gridkeep migrate --to')
  })
})
