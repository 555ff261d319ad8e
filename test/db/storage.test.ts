import { describe, expect, test } from 'bun:test'
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import { migrate } from '../../src/db/migrate'
import { embeddedMigrations } from '../../src/db/migrations.gen'
import { openDb } from '../../src/db/open'
import { users } from '../../src/db/schema'
import { writeTx } from '../../src/db/tx'

const fresh = () => {
  const dir = mkdtempSync('/tmp/gridkeep-db-')
  const opened = openDb({ path: join(dir, 'g.db') })
  migrate(opened.db)
  return { ...opened, dir }
}
const insertUser = (db: ReturnType<typeof fresh>['db'], id: string) =>
  db
    .insert(users)
    .values({ id, email: `${id}@x.test`, password_hash: 'h', full_name: 'n', created_at: 1, updated_at: 1 })
    .run()

describe('openDb', () => {
  test('WAL, foreign keys, busy timeout and synchronous=NORMAL by default', () => {
    const { sqlite, dir } = fresh()
    expect(sqlite.query('PRAGMA journal_mode').get()).toEqual({ journal_mode: 'wal' })
    expect(sqlite.query('PRAGMA foreign_keys').get()).toEqual({ foreign_keys: 1 })
    expect(sqlite.query('PRAGMA synchronous').get()).toEqual({ synchronous: 1 })
    expect((sqlite.query('PRAGMA busy_timeout').get() as any).timeout).toBe(5000)
    sqlite.close()
    rmSync(dir, { recursive: true })
  })

  test('SQLITE_SYNCHRONOUS=full gives synchronous=FULL', () => {
    const dir = mkdtempSync('/tmp/gridkeep-db-')
    const { sqlite } = openDb({ path: join(dir, 'g.db'), synchronous: 'full' })
    expect(sqlite.query('PRAGMA synchronous').get()).toEqual({ synchronous: 2 })
    sqlite.close()
    rmSync(dir, { recursive: true })
  })
})

describe('writeTx', () => {
  test('commits a synchronous callback under BEGIN IMMEDIATE and returns its value', () => {
    const { db, sqlite, dir } = fresh()
    const out = writeTx(db, (tx) => {
      insertUser(tx as any, 'u1')
      // Inside the transaction the write lock is already held: IMMEDIATE, not DEFERRED.
      expect(sqlite.inTransaction).toBe(true)
      return 42
    })
    expect(out).toBe(42)
    expect(db.select().from(users).where(eq(users.id, 'u1')).get()).toBeDefined()
    sqlite.close()
    rmSync(dir, { recursive: true })
  })

  test('rolls back on throw', () => {
    const { db, sqlite, dir } = fresh()
    expect(() =>
      writeTx(db, (tx) => {
        insertUser(tx as any, 'u2')
        throw new Error('boom')
      }),
    ).toThrow('boom')
    expect(db.select().from(users).all()).toHaveLength(0)
    sqlite.close()
    rmSync(dir, { recursive: true })
  })

  test('an async callback is rejected at run time and its writes rolled back', () => {
    const { db, sqlite, dir } = fresh()
    expect(() =>
      writeTx(db, ((tx: any) => {
        insertUser(tx, 'u3')
        return Promise.resolve(1)
      }) as any),
    ).toThrow('writeTx callback must be synchronous')
    expect(db.select().from(users).all()).toHaveLength(0)
    sqlite.close()
    rmSync(dir, { recursive: true })
  })

  test('nested in another writeTx it is a savepoint: its own throw undoes only its writes', () => {
    const { db, sqlite, dir } = fresh()
    writeTx(db, (tx) => {
      insertUser(tx as any, 'outer')
      expect(() =>
        writeTx(db, (inner) => {
          insertUser(inner as any, 'inner')
          throw new Error('inner boom')
        }),
      ).toThrow('inner boom')
    })
    expect(
      db
        .select()
        .from(users)
        .all()
        .map((u) => u.id),
    ).toEqual(['outer'])
    expect(sqlite.inTransaction).toBe(false)
    sqlite.close()
    rmSync(dir, { recursive: true })
  })

  test('a second connection cannot write while a writeTx holds the lock', () => {
    const { db, sqlite, dir } = fresh()
    const other = openDb({ path: join(dir, 'g.db') }).sqlite
    other.exec('PRAGMA busy_timeout = 0')
    writeTx(db, (tx) => {
      insertUser(tx as any, 'u4')
      expect(() => other.exec('BEGIN IMMEDIATE')).toThrow(/locked|busy/i)
    })
    other.exec('BEGIN IMMEDIATE')
    other.exec('COMMIT')
    other.close()
    sqlite.close()
    rmSync(dir, { recursive: true })
  })
})

describe('migrations', () => {
  test('the embedded migrations are exactly the files drizzle-kit wrote', () => {
    const journal = JSON.parse(readFileSync('drizzle/meta/_journal.json', 'utf8'))
    expect(embeddedMigrations.journal).toEqual(journal)
    const onDisk = readdirSync('drizzle').filter((f) => f.endsWith('.sql'))
    expect(
      Object.keys(embeddedMigrations.sql)
        .map((tag) => `${tag}.sql`)
        .sort(),
    ).toEqual(onDisk.sort())
    for (const [tag, text] of Object.entries(embeddedMigrations.sql)) {
      expect(text).toBe(readFileSync(`drizzle/${tag}.sql`, 'utf8'))
    }
  })

  test('the migrations match the schema (drizzle-kit has nothing left to generate)', () => {
    // drizzle-kit only takes a relative output folder; data/ is git-ignored.
    const out = `data/.migration-check-${process.pid}`
    rmSync(out, { recursive: true, force: true })
    cpSync('drizzle', out, { recursive: true })
    try {
      const run = Bun.spawnSync(
        [
          'bun',
          'x',
          'drizzle-kit',
          'generate',
          '--dialect',
          'sqlite',
          '--schema',
          './src/db/schema/index.ts',
          '--out',
          out,
        ],
        { stdout: 'pipe', stderr: 'pipe' },
      )
      const output = run.stdout.toString() + run.stderr.toString()
      expect(output).toContain('No schema changes')
    } finally {
      rmSync(out, { recursive: true, force: true })
    }
  })

  test('migrating twice is a no-op and creates every table', () => {
    const { db, sqlite, dir } = fresh()
    migrate(db)
    const tables = (
      sqlite.query("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[]
    ).map((r) => r.name)
    for (const name of [
      'users',
      'organizations',
      'memberships',
      'api_keys',
      'batches',
      'workers',
      'catalog_entries',
    ]) {
      expect(tables).toContain(name)
    }
    expect(sqlite.query('SELECT count(*) AS n FROM __drizzle_migrations').get()).toEqual({
      n: embeddedMigrations.journal.entries.length,
    })
    sqlite.close()
    rmSync(dir, { recursive: true })
  })
})
