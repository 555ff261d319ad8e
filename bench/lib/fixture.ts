import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createServer, type Server } from '../../src/compose'
import { type Config, loadConfig } from '../../src/config'
import { catalogEntries } from '../../src/db/schema'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { startServer } from '../../src/index'
import { newId } from '../../src/lib/ids'
import { generateRawKey, keyDisplayPrefix, sha256Hex } from '../../src/lib/keys'
import { setLogSink } from '../../src/lib/logger'
import { createPasswords } from '../../src/lib/passwords'
import { createUser } from '../../src/modules/users/service'

// A gridkeep server on a temporary database with one user, one org and one worker key.
// Logs go nowhere: benchmarks measure the protocol, not the terminal.

export interface Bench {
  config: Config
  deps: Server
  url: string
  key: string
  userId: string
  orgId: string
  stop(): Promise<void>
}

export async function benchServer(env: Record<string, string> = {}): Promise<Bench> {
  setLogSink(() => {})
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-bench-'))
  const config = loadConfig({
    DATA_DIR: dir,
    PORT: '0',
    HOST: '127.0.0.1',
    JWT_SECRET: 'bench-secret-bench-secret-bench-secret-0123',
    ADMIN_PASSWORD: 'bench-admin-password',
    ...env,
  })
  const deps = createServer(config, { passwords: createPasswords({ memoryCost: 256, timeCost: 1 }) })
  const running = await startServer(config, deps)
  const user = await createUser(
    deps,
    {
      email: 'bench@example.test',
      password: 'bench-password',
      full_name: 'Bench',
    },
    SYSTEM_AUDIT,
  )
  const [personal] = await deps.store.orgs.listMembershipsOf(user.id)
  const orgId = personal!.org_id
  const key = generateRawKey()
  await deps.store.keys.createKey(
    { type: 'worker', orgId },
    {
      name: 'bench',
      prefix: keyDisplayPrefix(key),
      key_hash: sha256Hex(key),
      created_by: user.id,
      created_at: deps.clock.now(),
      expires_at: null,
    },
    SYSTEM_AUDIT,
  )
  return {
    config,
    deps,
    url: running.url,
    key,
    userId: user.id,
    orgId,
    async stop() {
      await running.stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

export function addEntry(
  deps: Server,
  id: string,
  runtimeModelId: string,
  o: { vram_gb?: number | null } = {},
) {
  const now = deps.clock.now()
  deps.db
    .insert(catalogEntries)
    .values({
      id,
      display_name: id,
      runtime: 'ollama',
      runtime_model_id: runtimeModelId,
      vram_gb: o.vram_gb === undefined ? 8 : o.vram_gb,
      size_gb: 5,
      parameter_size: '8B',
      task_type: 'chat',
      created_at: now,
      updated_at: now,
    })
    .run()
}

/** `count` validated batches of `model`, inserted in one transaction (polls never read the input). */
export function addValidatedBatches(deps: Server, userId: string, model: string, count: number) {
  const now = deps.clock.now()
  const insert = deps.sqlite.prepare(
    `insert into batches (id, user_id, input_file_id, endpoint, completion_window, model, status,
       request_counts_total, created_at, updated_at)
     values (?, ?, ?, '/v1/chat/completions', '24h', ?, 'validated', 1, ?, ?)`,
  )
  deps.sqlite.transaction(() => {
    for (let i = 0; i < count; i++) insert.run(newId('batch_'), userId, newId('file-'), model, now, now)
  })()
}

export async function post(url: string, key: string, body: unknown) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  })
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${await res.text()}`)
  return res.json() as Promise<any>
}

/**
 * Poll latency: one worker hosting `model` registers, then polls 2 × `samples` times, each poll
 * claiming a batch; the first half warms up, the second half's times (ms) are returned.
 */
export async function pollTimes(gk: Bench, name: string, model: string, samples: number): Promise<number[]> {
  const { worker_id } = await post(`${gk.url}/workers/register`, gk.key, {
    name,
    models: [model],
    max_concurrent_jobs: samples * 2,
    runtimes: [{ engine: 'ollama', base_url: 'http://127.0.0.1:11434', status: 'online' }],
  })
  const times: number[] = []
  for (let i = 0; i < samples * 2; i++) {
    const t0 = performance.now()
    const { job } = await post(`${gk.url}/workers/poll`, gk.key, { worker_id })
    if (!job) throw new Error('no job')
    if (i >= samples) times.push(performance.now() - t0)
  }
  return times
}
