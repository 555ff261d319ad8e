import { describe, expect, test } from 'bun:test'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { type MigrationSet, migrate } from '../../src/db/migrate'
import { embeddedMigrations } from '../../src/db/migrations.gen'
import { openDb } from '../../src/db/open'

// Migrations are append-only: a released migration is never rewritten, or an existing database
// would re-run or skip it. Each release's set is pinned here by the SHA-256 of its files.
const RELEASED: { tag: string; sha256: string }[] = [
  { tag: '0000_init', sha256: '72b38f2792977284d5affdaaf2390ca4d08fe25fe5841e48f21d9d3b9efae842' },
  {
    tag: '0001_error_files_batch_output',
    sha256: 'e6fd3c65cdadf36f31e4b316d296afe1d7dccbb1919403eace2a39c29e04ee74',
  },
  {
    tag: '0002_batches_completed',
    sha256: '1fe464ec6a41e17183a01c7b084c71f5df13557eb157580ac1bb9b4fd6a020af',
  },
  { tag: '0003_usage', sha256: '3932565812e4864c6aa991c742c34bb79e5ec075365e1db37a7323a0367bc63d' },
  { tag: '0004_files_expires', sha256: '3ff8acf3424621bf5f7ce75efe2bf217f3cea471d7bedfea2acf905f1fac2033' },
  { tag: '0005_webhooks', sha256: '13bbb16010bc6a72a8c7f81ffe8b9fb836571dfd3ccd267ab76fc811f7b6415b' },
  { tag: '0006_fair_share', sha256: 'c5d4b53a12a03b794178d8288c3cabbd886350e3121c0acc44f8bfb29aebcaf1' },
  {
    tag: '0007_assignment_slot',
    sha256: 'c76814a16576a45a9d546317b8b393fbee12967bb5cef0288ad0e641d4bed337',
  },
  { tag: '0008_shards', sha256: '3771f149235af3c04585d1173645b91c061d662d317009121d4d799bd54d99c5' },
]

/** The PostgreSQL engine's released migrations (drizzle/postgres), pinned the same way. */
const RELEASED_POSTGRES: { tag: string; sha256: string }[] = [
  { tag: '0000_init', sha256: 'b2c1454808b32446da7484ada3d35ba6200b69605c931506f60faa75c20eed49' },
  {
    tag: '0001_validation_lease',
    sha256: '9b3f5765f06bd5f594dff05df8e6a3cca0dae6ed77adffa04ab973778cae6cfc',
  },
  { tag: '0002_rate_limit_hits', sha256: '352e951e0690db01d219873c346b322148e835e40737c95592cf74318c33610e' },
  {
    tag: '0003_batches_completed',
    sha256: '3303833978cc7ba4c71e507d4f02bfcfebaaf85e9fe421f68bc6ee1aae3af691',
  },
  { tag: '0004_usage', sha256: '1f9e4860f48ec2c2b700312adb075b2a0c5d27cb0d2d28daa65f478821392605' },
  { tag: '0005_files_expires', sha256: '2b8d85c2d03cea50dad446670f4f48acadc8e8861df5c29196090e83021ce7f8' },
  { tag: '0006_webhooks', sha256: 'f10d0ba0e9883c6cd0b13b33df45e3f77b73948f8302ca4a3793a69eed6297b6' },
  { tag: '0007_fair_share', sha256: 'dc3bba7ae43be3c0b16fc6a313af7625b78e22c4ed10259c58d456ea2551d905' },
  { tag: '0008_jsonb_values', sha256: '67f74593a30a24ac1a7ae664eaefe41541e40eba9433c25138b34c1fbd2fc6c3' },
  {
    tag: '0009_assignment_slot',
    sha256: 'ae4bd022fde3ff3146c844a08598a83fb816add8d0c0aec6431d53767d082530',
  },
  { tag: '0010_shards', sha256: '027d98a1dab5e1cd0f7ca718f13d4856492c4a3d19425bee2438900864bff74a' },
]

/** The migration set as it was at a release: the first `count` entries of today's journal. */
function releasedSet(count: number): MigrationSet {
  const entries = embeddedMigrations.journal.entries.slice(0, count)
  return {
    journal: { ...embeddedMigrations.journal, entries },
    sql: Object.fromEntries(entries.map((e) => [e.tag, embeddedMigrations.sql[e.tag] as string])),
  }
}

describe('upgrades', () => {
  test('released migrations are unchanged and still first in the journal', () => {
    RELEASED.forEach(({ tag, sha256 }, i) => {
      expect(embeddedMigrations.journal.entries[i]?.tag).toBe(tag)
      const onDisk = readFileSync(`drizzle/${tag}.sql`)
      expect(new Bun.CryptoHasher('sha256').update(onDisk).digest('hex')).toBe(sha256)
    })
  })

  test('released PostgreSQL migrations are unchanged and still first in their journal', () => {
    const journal = JSON.parse(readFileSync('drizzle/postgres/meta/_journal.json', 'utf8')) as {
      entries: { tag: string }[]
    }
    RELEASED_POSTGRES.forEach(({ tag, sha256 }, i) => {
      expect(journal.entries[i]?.tag).toBe(tag)
      const onDisk = readFileSync(`drizzle/postgres/${tag}.sql`)
      expect(new Bun.CryptoHasher('sha256').update(onDisk).digest('hex')).toBe(sha256)
    })
  })

  test('a database built by the first release, with data in it, upgrades to today with its data intact', () => {
    const dir = mkdtempSync('/tmp/gridkeep-upgrade-')
    try {
      const { db, sqlite } = openDb({ path: join(dir, 'g.db') })
      migrate(db, releasedSet(1))
      // Rows written in the first release's shape, by raw SQL (today's schema may differ).
      sqlite.exec(`
        INSERT INTO users (id, email, password_hash, full_name, platform_role, is_active, must_change_password, token_version, created_at, updated_at)
          VALUES ('user_a', 'a@x.test', 'hash-a', 'Ada', 'superadmin', 1, 0, 3, 100, 101);
        INSERT INTO organizations (id, name, personal, created_at) VALUES ('org_a', 'Ada''s Personal Org', 1, 100);
        INSERT INTO memberships (org_id, user_id, role, created_at) VALUES ('org_a', 'user_a', 'owner', 100);
        INSERT INTO files (id, user_id, filename, purpose, bytes, batch_id, created_at)
          VALUES ('file-in', 'user_a', 'in.jsonl', 'batch', 10, NULL, 102);
        INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status, attempts,
            request_counts_total, request_counts_completed, request_counts_failed, created_at, updated_at,
            output_file_id, error_file_id)
          VALUES ('batch_a', 'user_a', 'file-in', '/v1/chat/completions', '24h', 'm', 'completed', 1, 2, 1, 1, 103, 104,
            'file-out', 'file-err');
        INSERT INTO files (id, user_id, filename, purpose, bytes, batch_id, created_at) VALUES
          ('file-out', 'user_a', 'batch_a_output.jsonl', 'batch_output', 20, 'batch_a', 104),
          ('file-err', 'user_a', 'batch_a_error.jsonl', 'batch_error', 30, 'batch_a', 104);
      `)
      const before = {
        users: sqlite.query('SELECT id, email, password_hash, token_version, platform_role FROM users').all(),
        memberships: sqlite.query('SELECT * FROM memberships').all(),
        batches: sqlite
          .query('SELECT id, status, attempts, request_counts_total, request_counts_completed FROM batches')
          .all(),
        files: sqlite.query('SELECT id, user_id, filename, bytes, batch_id, created_at FROM files').all(),
      }
      expect(sqlite.query("SELECT purpose FROM files WHERE id = 'file-err'").get()).toEqual({
        purpose: 'batch_error',
      })

      migrate(db) // today's full set
      expect(sqlite.query('SELECT count(*) AS n FROM __drizzle_migrations').get()).toEqual({
        n: embeddedMigrations.journal.entries.length,
      })
      expect(
        sqlite.query('SELECT id, email, password_hash, token_version, platform_role FROM users').all(),
      ).toEqual(before.users)
      expect(sqlite.query('SELECT * FROM memberships').all()).toEqual(before.memberships)
      expect(
        sqlite
          .query('SELECT id, status, attempts, request_counts_total, request_counts_completed FROM batches')
          .all(),
      ).toEqual(before.batches)
      expect(
        sqlite.query('SELECT id, user_id, filename, bytes, batch_id, created_at FROM files').all(),
      ).toEqual(before.files)
      // docs/api.md §5: error files carry purpose batch_output, as OpenAI's do; the batch still names its
      // error file.
      expect(sqlite.query('SELECT id, purpose FROM files ORDER BY id').all()).toEqual([
        { id: 'file-err', purpose: 'batch_output' },
        { id: 'file-in', purpose: 'batch' },
        { id: 'file-out', purpose: 'batch_output' },
      ])
      expect(sqlite.query('SELECT output_file_id, error_file_id FROM batches').get()).toEqual({
        output_file_id: 'file-out',
        error_file_id: 'file-err',
      })
      expect(sqlite.query('PRAGMA integrity_check').get()).toEqual({ integrity_check: 'ok' })
      sqlite.close()
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('batches waiting when placement arrives age from their last change (queued_at backfilled)', () => {
    const dir = mkdtempSync('/tmp/gridkeep-upgrade-')
    try {
      const { db, sqlite } = openDb({ path: join(dir, 'g.db') })
      migrate(db, releasedSet(RELEASED.length))
      sqlite.exec(`
        INSERT INTO users (id, email, password_hash, full_name, platform_role, is_active, must_change_password, token_version, created_at, updated_at)
          VALUES ('user_a', 'a@x.test', 'hash-a', 'Ada', 'user', 1, 0, 0, 100, 100);
        INSERT INTO batches (id, user_id, input_file_id, endpoint, completion_window, model, status, attempts,
            request_counts_total, created_at, updated_at)
          VALUES ('batch_w', 'user_a', 'file-in', '/v1/chat/completions', '24h', 'm', 'validated', 1, 2, 100, 250),
                 ('batch_d', 'user_a', 'file-in', '/v1/chat/completions', '24h', 'm', 'completed', 0, 2, 100, 300);
      `)
      migrate(db)
      // docs/api.md §7 placement: "waited" counts from when a batch last became validated; for one
      // already waiting at the upgrade that is its last change. Only waiting batches get one.
      expect(sqlite.query('SELECT id, queued_at FROM batches ORDER BY id').all()).toEqual([
        { id: 'batch_d', queued_at: null },
        { id: 'batch_w', queued_at: 250 },
      ])
      sqlite.close()
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
