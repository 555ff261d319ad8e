import { Database } from 'bun:sqlite'
import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { main } from '../../src/cli'
import { BackupError, backupDatabase } from '../../src/ops/backup'
import { makeTestApp } from '../helpers/app'
import { makeUser } from '../helpers/builders'
import { baseEnv, CLI, PROCESS_TEST_TIMEOUT, startServerProcess, tempDir } from '../helpers/ops'

// `gridkeep backup` copies the SQLite database: these apps stay on SQLite in the PostgreSQL run.
const SQLITE = { DATABASE_URL: '' }

// `gridkeep backup <path>` (issue 6): a consistent online copy, never over an existing file
// without --force, path and size printed.

const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})
const outDir = () => {
  const d = tempDir('backup')
  dirs.push(d)
  return d
}

function inspect(path: string) {
  const db = new Database(path, { readonly: true })
  try {
    return {
      integrity: db.query('PRAGMA integrity_check').values()[0]![0],
      users: (db.query('SELECT count(*) AS n FROM users').get() as { n: number }).n,
      orgs: (db.query('SELECT count(*) AS n FROM organizations').get() as { n: number }).n,
      orgsWithOwner: (
        db.query("SELECT count(DISTINCT org_id) AS n FROM memberships WHERE role = 'owner'").get() as {
          n: number
        }
      ).n,
      journal: db.query('PRAGMA journal_mode').values()[0]![0],
    }
  } finally {
    db.close()
  }
}

function captureIo(env: Record<string, string>) {
  const out: string[] = []
  const err: string[] = []
  return { io: { out: (s: string) => void out.push(s), err: (s: string) => void err.push(s), env }, out, err }
}

describe('backupDatabase', () => {
  test('copies the live database into a checked, owner-only file, and refuses to overwrite without force', async () => {
    const t = makeTestApp(SQLITE)
    await makeUser(t)
    await makeUser(t)
    const target = join(outDir(), 'copy.db')

    const result = backupDatabase(t.config.DATABASE_PATH, target)
    expect(result.path).toBe(target)
    expect(result.bytes).toBe(statSync(target).size)
    expect(statSync(target).mode & 0o777).toBe(0o600)
    expect(inspect(target)).toMatchObject({ integrity: 'ok', users: 2 })

    const before = readFileSync(target)
    await makeUser(t)
    expect(() => backupDatabase(t.config.DATABASE_PATH, target)).toThrow(BackupError)
    expect(() => backupDatabase(t.config.DATABASE_PATH, target)).toThrow(/already exists.*--force/)
    expect(readFileSync(target).equals(before)).toBe(true)

    backupDatabase(t.config.DATABASE_PATH, target, { force: true })
    expect(inspect(target).users).toBe(3)
    // Nothing but the backup is left beside it.
    expect(readdirSync(join(target, '..'))).toEqual(['copy.db'])
    t.close()
  })

  test('works on a database no server has open', async () => {
    const t = makeTestApp(SQLITE)
    await makeUser(t)
    t.deps.sqlite.close()
    const target = join(outDir(), 'cold.db')
    backupDatabase(t.config.DATABASE_PATH, target)
    expect(inspect(target)).toMatchObject({ integrity: 'ok', users: 1 })
    t.close()
  })

  test('refuses a missing database, a directory as target, and the database itself', () => {
    const dir = outDir()
    expect(() => backupDatabase(join(dir, 'none.db'), join(dir, 'x.db'))).toThrow(/no database at/)
    const t = makeTestApp(SQLITE)
    mkdirSync(join(dir, 'sub'))
    expect(() => backupDatabase(t.config.DATABASE_PATH, join(dir, 'sub'))).toThrow(/is a directory/)
    expect(() => backupDatabase(t.config.DATABASE_PATH, t.config.DATABASE_PATH, { force: true })).toThrow(
      /the database itself/,
    )
    expect(existsSync(join(dir, 'x.db'))).toBe(false)
    t.close()
  })
})

describe('gridkeep backup', () => {
  test('prints the path and size; exit 1 on an existing file, 0 with --force; 2 on bad usage', async () => {
    const t = makeTestApp(SQLITE)
    await makeUser(t)
    const env = { DATA_DIR: t.config.DATA_DIR }
    const target = join(outDir(), 'cli.db')

    let c = captureIo(env)
    expect(await main(['backup', target], c.io)).toBe(0)
    expect(c.out).toEqual([`backup written: ${target} (${formatSize(statSync(target).size)})`])

    writeFileSync(target, 'precious')
    c = captureIo(env)
    expect(await main(['backup', target], c.io)).toBe(1)
    expect(c.err.join('\n')).toContain('already exists (use --force to overwrite it)')
    expect(readFileSync(target, 'utf8')).toBe('precious')

    c = captureIo(env)
    expect(await main(['backup', '--force', target], c.io)).toBe(0)
    expect(inspect(target).integrity).toBe('ok')

    for (const argv of [['backup'], ['backup', 'a.db', 'b.db'], ['backup', '--bogus', 'a.db']]) {
      c = captureIo(env)
      expect(await main(argv, c.io)).toBe(2)
      expect(c.err).toHaveLength(1)
    }
    t.close()
  })

  test(
    'a consistent copy while the server runs under write load',
    async () => {
      const dataDir = outDir()
      const env = baseEnv(dataDir)
      const server = await startServerProcess(env)
      const signup = { email: 'load@example.test', password: 'load-password-1', full_name: 'Load' }
      const post = (path: string, body: unknown, token?: string) =>
        fetch(`${server.url}${path}`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            ...(token ? { authorization: `Bearer ${token}` } : {}),
          },
          body: JSON.stringify(body),
        })
      expect((await post('/v1/auth/signup', signup)).status).toBe(200)
      const { access_token } = (await (
        await post('/v1/auth/login', { email: signup.email, password: signup.password })
      ).json()) as {
        access_token: string
      }

      // Four writers create team orgs (an org and its owner membership in one transaction).
      let writing = true
      let created = 0
      const writer = async () => {
        while (writing) {
          const res = await post('/v1/orgs', { name: `team ${created}` }, access_token)
          expect(res.status).toBe(201)
          created++
        }
      }
      const writers = Promise.all([writer(), writer(), writer(), writer()])
      while (created < 20) await Bun.sleep(10)

      const targets = [join(dataDir, 'live-1.db'), join(dataDir, 'live-2.db')]
      const createdBefore = created
      for (const target of targets) {
        const proc = Bun.spawn(['bun', CLI, 'backup', target], { env, stdout: 'pipe', stderr: 'pipe' })
        expect(await proc.exited).toBe(0)
        expect(await new Response(proc.stdout).text()).toStartWith(`backup written: ${target} (`)
      }
      writing = false
      await writers
      const createdAfter = created

      const first = inspect(targets[0]!)
      const second = inspect(targets[1]!)
      for (const copy of [first, second]) {
        expect(copy.integrity).toBe('ok')
        expect(copy.journal).not.toBe('wal') // self-contained: no -wal file needed
        // Each user has a Personal Org; the team orgs counted are those of our writers.
        const teams = copy.orgs - copy.users
        expect(teams).toBeGreaterThanOrEqual(createdBefore)
        expect(teams).toBeLessThanOrEqual(createdAfter)
        // One snapshot: no org without the owner membership written in the same transaction.
        expect(copy.orgsWithOwner).toBe(copy.orgs)
      }
      expect(second.orgs).toBeGreaterThanOrEqual(first.orgs)
      server.proc.kill('SIGTERM')
      expect(await server.exited).toBe(0)
    },
    PROCESS_TEST_TIMEOUT,
  )
})

function formatSize(bytes: number) {
  return `${(bytes / 1024).toFixed(1)} KiB, ${bytes} bytes`
}
