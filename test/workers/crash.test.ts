import { Database } from 'bun:sqlite'
import { afterAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createServer } from '../../src/compose'
import { loadConfig } from '../../src/config'
import { apiKeys } from '../../src/db/schema'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { newId } from '../../src/lib/ids'
import { generateRawKey, keyDisplayPrefix, sha256Hex } from '../../src/lib/keys'
import { createUser } from '../../src/modules/users/service'
import { cheapPasswords } from '../helpers/app'
import { ownProcess } from '../helpers/children'
import { makeCatalogEntry, makeValidatedBatch, registerBody } from '../helpers/workers'

// A crash mid claim-storm (SIGKILL of the server process) must leave every batch either
// `validated` or held by exactly one worker, and the database intact.

const dir = mkdtempSync(join(tmpdir(), 'gridkeep-crash-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const env = {
  ...process.env,
  DATA_DIR: dir,
  PORT: '0',
  HOST: '127.0.0.1',
  JWT_SECRET: 'crash-test-secret-crash-test-secret-0123456789',
  ADMIN_PASSWORD: 'admin-password-1',
  LOG_LEVEL: 'info',
}

async function seed(batchCount: number) {
  const deps = createServer(loadConfig(env), { passwords: cheapPasswords() })
  const user = await createUser(
    deps,
    {
      email: 'crash@example.test',
      password: 'pw-crash-test-1',
      full_name: 'Crash',
    },
    SYSTEM_AUDIT,
  )
  const orgId = deps.sqlite
    .query<{ org_id: string }, [string]>('select org_id from memberships where user_id = ?')
    .get(user.id)!.org_id
  const raw = generateRawKey()
  deps.db
    .insert(apiKeys)
    .values({
      id: newId('key_'),
      key_type: 'worker',
      name: 'crash',
      prefix: keyDisplayPrefix(raw),
      key_hash: sha256Hex(raw),
      org_id: orgId,
      created_at: deps.clock.now(),
    })
    .run()
  const entry = await makeCatalogEntry(deps, { runtime_model_id: 'crash:1' })
  for (let i = 0; i < batchCount; i++)
    await makeValidatedBatch(deps, { userId: user.id, model: entry.id, requests: 1 })
  deps.sqlite.close()
  return raw
}

async function spawnServer() {
  const proc = ownProcess(Bun.spawn(['bun', 'run', 'src/index.ts'], { env, stdout: 'pipe', stderr: 'pipe' }))
  const reader = proc.stdout.getReader()
  let text = ''
  const deadline = Date.now() + 15_000
  while (Date.now() < deadline) {
    const { value, done } = await reader.read()
    if (done) break
    text += new TextDecoder().decode(value)
    const m = /"msg":"gridkeep listening","url":"(http:\/\/[^"]+)"/.exec(text)
    if (m) {
      reader.releaseLock()
      void proc.stdout.pipeTo(new WritableStream()).catch(() => {})
      return { proc, url: m[1]! }
    }
  }
  proc.kill('SIGKILL')
  throw new Error(`server did not start: ${text} ${await new Response(proc.stderr).text()}`)
}

function checkInvariants() {
  const db = new Database(join(dir, 'gridkeep.db'))
  try {
    expect(db.query('PRAGMA integrity_check').get()).toEqual({ integrity_check: 'ok' })
    const rows = db
      .query<{ status: string; holders: number }, []>(
        `select b.status, (select count(*) from batch_assignments a where a.batch_id = b.id) as holders from batches b`,
      )
      .all()
    for (const r of rows) {
      if (r.status === 'validated') expect(r.holders).toBe(0)
      else {
        expect(r.status).toBe('in_progress')
        expect(r.holders).toBe(1)
      }
    }
    return rows.filter((r) => r.status === 'in_progress').length
  } finally {
    db.close()
  }
}

test('SIGKILL during a claim storm: every batch validated or held by exactly one worker; integrity ok', async () => {
  const key = await seed(400)
  const first = await spawnServer()
  const call = (url: string, path: string, body: unknown) =>
    fetch(url + path, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    })
  const workerIds: string[] = []
  for (let i = 0; i < 8; i++) {
    const res = await call(
      first.url,
      '/workers/register',
      registerBody({ models: ['crash:1'], max_concurrent_jobs: 1000 }),
    )
    expect(res.status).toBe(200)
    workerIds.push(((await res.json()) as { worker_id: string }).worker_id)
  }
  let claims = 0
  let killed = false
  const storm = Array.from({ length: 32 }, async (_, i) => {
    const wid = workerIds[i % workerIds.length]
    while (!killed) {
      try {
        const res = await call(first.url, '/workers/poll', { worker_id: wid })
        const { job } = (await res.json()) as { job: unknown }
        if (!job) return
        if (++claims === 60) {
          killed = true
          first.proc.kill('SIGKILL')
        }
      } catch {
        return // the server is gone
      }
    }
  })
  await Promise.all(storm)
  await first.proc.exited
  expect(killed).toBe(true)
  const held = checkInvariants()
  expect(held).toBeGreaterThanOrEqual(60)
  expect(held).toBeLessThan(400)

  // It restarts on the same files and keeps serving.
  const second = await spawnServer()
  try {
    expect((await fetch(`${second.url}/readyz`)).status).toBe(200)
    const more = await call(second.url, '/workers/poll', { worker_id: workerIds[0] })
    expect(((await more.json()) as { job: unknown }).job).not.toBeNull()
  } finally {
    second.proc.kill('SIGTERM')
    expect(await second.proc.exited).toBe(0)
  }
  expect(checkInvariants()).toBe(held + 1)
}, 60_000)
