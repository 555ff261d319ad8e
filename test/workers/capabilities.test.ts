import { afterAll, describe, expect, test } from 'bun:test'
import type { Job } from '../../src/modules/workers/claim'
import { buildRequest, makeTestApp, readRes, type TestApp } from '../helpers/app'
import { jsonl, makeBatch, validateAll } from '../helpers/batches'
import {
  batchRow,
  type Fleet,
  heartbeat,
  inventoryItem,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  poll,
  registerWorker,
} from '../helpers/workers'

// docs/api.md §7 Poll rule 7: a batch goes only to a worker whose engine has every capability the
// batch needs (and whose entry has it too: effective = model AND engine). Runtimes report their
// engine's capabilities at registration; without a report the engine's defaults (§7) count.

const t = makeTestApp()
afterAll(() => t.close())

let n = 0
const ALL = { json_mode: true, vision: true, logprobs: true }

/**
 * A heartbeated worker whose one runtime is `engine` (reporting `capabilities`, or nothing) and
 * hosts `name`; `o` overrides the registration body.
 */
async function hostWorker(
  app: TestApp,
  f: Fleet,
  name: string,
  engine = 'ollama',
  capabilities?: Record<string, boolean>,
  o: Record<string, unknown> = {},
) {
  const wid = await registerWorker(app, f.key, {
    runtimes: [
      { engine, base_url: 'http://127.0.0.1:8000', status: 'online', ...(capabilities && { capabilities }) },
    ],
    ...o,
  })
  expect(
    (await heartbeat(app, f.key, wid, { inventory: [inventoryItem(name, { runtime: engine })] })).status,
  ).toBe(200)
  return wid
}

/** A catalogue entry served as a fresh runtime name; returns the entry and the name. */
async function entryOf(app: TestApp, capabilities: Record<string, boolean>, o: Record<string, unknown> = {}) {
  const name = `caps-model:${++n}`
  const entry = await makeCatalogEntry(app.deps, { runtime_model_id: name, capabilities, ...o })
  return { entry, name }
}

const jsonLine = (id: string, model: string) =>
  JSON.stringify({
    custom_id: id,
    body: {
      model,
      messages: [{ role: 'user', content: 'as JSON' }],
      response_format: { type: 'json_object' },
    },
  })

describe('the claim', () => {
  test('a batch needing json_mode goes to an engine that has it: reported, or by default; never to one that lacks it', async () => {
    const f = await makeFleet(t)
    const { entry, name } = await entryOf(t, ALL)
    const first = await makeBatch(t, f.user, jsonl([jsonLine('a', entry.id), jsonLine('b', entry.id)]))
    const second = await makeBatch(t, f.user, jsonl([jsonLine('a', entry.id)]))
    await validateAll(t)
    expect(await batchRow(t.deps, first.id)).toMatchObject({ status: 'validated', needs: 'json_mode' })

    const lacks = await hostWorker(t, f, name, 'ollama', { json_mode: false })
    const reports = await hostWorker(t, f, name, 'ollama', { json_mode: true, logprobs: false })
    const byDefault = await hostWorker(t, f, name, 'ollama')
    // The poll answers: nothing it may run, though two batches of its model wait.
    expect(await poll(t, f.key, lacks)).toBeNull()
    expect((await batchRow(t.deps, first.id)).status).toBe('validated')
    expect((await poll(t, f.key, reports))?.job_id).toBe(first.id)
    expect((await poll(t, f.key, byDefault))?.job_id).toBe(second.id)
    expect(await poll(t, f.key, lacks)).toBeNull()
  })

  test('engine defaults: tgi serves no embeddings, vllm does (docs/api.md §7)', async () => {
    const f = await makeFleet(t)
    const name = `caps-embed:${++n}`
    const entry = await makeCatalogEntry(t.deps, {
      task_type: 'embedding',
      capabilities: {},
      profiles: [
        { runtime: 'tgi', runtime_model_id: name },
        { runtime: 'vllm', runtime_model_id: name },
      ],
    })
    const batch = await makeValidatedBatch(t.deps, {
      userId: f.user.id,
      model: entry.id,
      endpoint: '/v1/embeddings',
      needs: 'embeddings',
    })
    const tgi = await hostWorker(t, f, name, 'tgi')
    const vllm = await hostWorker(t, f, name, 'vllm')
    expect(await poll(t, f.key, tgi)).toBeNull()
    // A tgi runtime that reports embeddings (a newer server) may take it.
    const tgiWithEmbeddings = await hostWorker(t, f, name, 'tgi', { embeddings: true })
    const other = await makeValidatedBatch(t.deps, {
      userId: f.user.id,
      model: entry.id,
      endpoint: '/v1/embeddings',
      needs: 'embeddings',
    })
    expect((await poll(t, f.key, vllm))?.job_id).toBe(batch.id)
    expect((await poll(t, f.key, tgiWithEmbeddings))?.job_id).toBe(other.id)
  })

  test('an older daemon that reports no capabilities, or one that reports none, still gets batches that need nothing', async () => {
    const f = await makeFleet(t)
    const { entry, name } = await entryOf(t, {})
    const a = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const b = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const older = await hostWorker(t, f, name, 'openai')
    const nothing = await hostWorker(t, f, name, 'lmstudio', {
      json_mode: false,
      vision: false,
      embeddings: false,
      logprobs: false,
    })
    expect((await poll(t, f.key, older))?.job_id).toBe(a.id)
    expect((await poll(t, f.key, nothing))?.job_id).toBe(b.id)
  })

  test('of one owner’s batches, a worker takes the oldest it can run; the older one waits for an engine that can', async () => {
    const f = await makeFleet(t)
    const { entry, name } = await entryOf(t, ALL)
    const needy = await makeValidatedBatch(t.deps, {
      userId: f.user.id,
      model: entry.id,
      needs: 'json_mode,logprobs',
    })
    const plain = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id })
    const noLogprobs = await hostWorker(t, f, name, 'lmstudio')
    const full = await hostWorker(t, f, name, 'vllm')
    expect((await poll(t, f.key, noLogprobs))?.job_id).toBe(plain.id)
    expect((await poll(t, f.key, full))?.job_id).toBe(needy.id)
  })

  test('the entry must have it too: a batch needing what its entry no longer has runs nowhere until the entry has it again', async () => {
    const f = await makeFleet(t)
    const { entry, name } = await entryOf(t, { json_mode: true })
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id, needs: 'json_mode' })
    // The manifest dropped json_mode after the batch was validated (docs/api.md §4 catalogue rule 7).
    await makeCatalogEntry(t.deps, { id: entry.id, runtime_model_id: name, capabilities: {} })
    const wid = await hostWorker(t, f, name, 'vllm')
    expect(await poll(t, f.key, wid)).toBeNull()
    await makeCatalogEntry(t.deps, {
      id: entry.id,
      runtime_model_id: name,
      capabilities: { json_mode: true },
    })
    expect((await poll(t, f.key, wid))?.job_id).toBe(batch.id)
  })

  test('a runtime’s capabilities hold until it registers again', async () => {
    const f = await makeFleet(t)
    const { entry, name } = await entryOf(t, ALL)
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id, needs: 'vision' })
    const wid = await hostWorker(t, f, name, 'ollama', { vision: false })
    expect(await poll(t, f.key, wid)).toBeNull()
    const again = await hostWorker(t, f, name, 'ollama', { vision: true }, { worker_id: wid })
    expect(again).toBe(wid)
    expect((await poll(t, f.key, wid))?.job_id).toBe(batch.id)
  })
})

describe('why it waits (docs/api.md §6 `waiting`)', () => {
  test('no_capability while the only workers fitting it lack what it needs; queued once one has it', async () => {
    const f = await makeFleet(t)
    const { entry, name } = await entryOf(t, ALL)
    const batch = await makeValidatedBatch(t.deps, {
      userId: f.user.id,
      model: entry.id,
      needs: 'json_mode,logprobs',
    })
    const waiting = async () =>
      (await t.req('GET', `/v1/batches/${batch.id}`, { token: f.user.token })).body.waiting
    await hostWorker(t, f, name, 'lmstudio', { json_mode: false })
    expect(await waiting()).toEqual({
      reason: 'no_capability',
      message: `1 online worker can run ${entry.id}, but none whose runtime supports json_mode, logprobs.`,
      details: { needs: ['json_mode', 'logprobs'], workers: 1 },
    })
    await hostWorker(t, f, name, 'vllm')
    expect(await waiting()).toMatchObject({ reason: 'queued', details: { workers: 1 } })
  })
})

describe('shards (docs/api.md §16)', () => {
  const s = makeTestApp({ SHARD_MIN_REQUESTS: '10', SHARD_MAX_REQUESTS: '100' })
  afterAll(() => s.close())

  test('the shards of a split batch go only to engines that meet its needs', async () => {
    const f = await makeFleet(s)
    const { entry, name } = await entryOf(s, ALL)
    const batch = await makeValidatedBatch(s.deps, {
      userId: f.user.id,
      model: entry.id,
      requests: 60,
      indexed: true,
      needs: 'logprobs',
    })
    const shardsOf = { capabilities: { shards: true }, max_concurrent_jobs: 4 }
    const a = await hostWorker(s, f, name, 'vllm', undefined, shardsOf)
    const lacks = await hostWorker(s, f, name, 'lmstudio', undefined, shardsOf)
    const b = await hostWorker(s, f, name, 'sglang', undefined, shardsOf)
    const first = (await poll(s, f.key, a))!
    expect(first.batch_id).toBe(batch.id)
    expect((await batchRow(s.deps, batch.id)).split).toBe(true)
    // Split and in progress with requests left: not for an engine without logprobs.
    expect(await poll(s, f.key, lacks)).toBeNull()
    expect((await poll(s, f.key, b))?.batch_id).toBe(batch.id)
  })

  test('a backup copy of a shard goes only to an engine that meets its batch’s needs', async () => {
    const f = await makeFleet(s)
    const { entry, name } = await entryOf(s, ALL)
    const batch = await makeValidatedBatch(s.deps, {
      userId: f.user.id,
      model: entry.id,
      requests: 60,
      indexed: true,
      needs: 'logprobs',
    })
    const shardsOf = { capabilities: { shards: true }, max_concurrent_jobs: 8 }
    const holder = await hostWorker(s, f, name, 'vllm', undefined, shardsOf)
    const lacks = await hostWorker(s, f, name, 'lmstudio', undefined, shardsOf)
    const able = await hostWorker(s, f, name, 'sglang', undefined, shardsOf)
    // The holder cuts the whole batch; nothing is left but backup copies (docs/api.md §16).
    const held: Job[] = []
    for (let job = await poll(s, f.key, holder); job; job = await poll(s, f.key, holder)) held.push(job)
    expect(held.reduce((n, j) => n + j.shard!.requests, 0)).toBe(60)
    expect(await poll(s, f.key, lacks)).toBeNull()
    expect(await poll(s, f.key, able)).toMatchObject({
      batch_id: batch.id,
      job_id: held[0]!.job_id,
      backup: true,
    })
  })
})

describe('held polls (wait_seconds)', () => {
  function heldPoll(key: string, workerId: string) {
    const req = buildRequest('http://localhost', 'POST', '/workers/poll', {
      token: key,
      body: { worker_id: workerId, wait_seconds: 30 },
    })
    return t.app.handle(req).then(readRes)
  }
  async function heldCount(count: number) {
    while (t.deps.pollWaiters.size !== count) await new Promise((r) => setImmediate(r))
  }

  test('a newly validated batch wakes only the held polls of engines that can run it', async () => {
    const f = await makeFleet(t)
    const { entry, name } = await entryOf(t, ALL)
    const lacks = await hostWorker(t, f, name, 'ollama', { json_mode: false })
    const has = await hostWorker(t, f, name, 'ollama')
    const lacking = heldPoll(f.key, lacks)
    await heldCount(1)
    const able = heldPoll(f.key, has)
    await heldCount(2)
    const wakes = t.deps.pollWaiters.wakes
    const needy = await makeBatch(t, f.user, jsonl([jsonLine('a', entry.id)]))
    await validateAll(t)
    expect(((await able).body.job as Job).job_id).toBe(needy.id)
    // Woken: the poll that could run it, and only that one; the other is still held.
    expect(t.deps.pollWaiters.wakes).toBe(wakes + 1)
    expect(t.deps.pollWaiters.size).toBe(1)
    const plain = await makeBatch(
      t,
      f.user,
      jsonl([JSON.stringify({ custom_id: 'a', body: { model: entry.id, messages: [] } })]),
    )
    await validateAll(t)
    expect(((await lacking).body.job as Job).job_id).toBe(plain.id)
  })
})

describe('registration and the worker row', () => {
  test('runtimes[].capabilities: booleans of the four names only (400 otherwise); the row shows what counts', async () => {
    const f = await makeFleet(t)
    for (const capabilities of [{ tools: true }, { json_mode: 'yes' }, ['json_mode']]) {
      const res = await t.req('POST', '/workers/register', {
        token: f.key,
        body: {
          name: 'box',
          runtimes: [{ engine: 'ollama', base_url: 'http://x', status: 'online', capabilities }],
        },
      })
      expect(res.status).toBe(400)
      expect(res.body.error.type).toBe('invalid_request_error')
    }
    const wid = await registerWorker(t, f.key, {
      runtimes: [
        { engine: 'lmstudio', base_url: 'http://a', status: 'online', capabilities: { vision: false } },
        { engine: 'vllm', base_url: 'http://b', status: 'online' },
      ],
    })
    const list = await t.req('GET', `/v1/orgs/${f.orgId}/workers`, { token: f.user.token })
    const row = list.body.data.find((w: { id: string }) => w.id === wid)
    expect(row.runtimes).toEqual([
      {
        engine: 'lmstudio',
        base_url: 'http://a',
        status: 'online',
        capabilities: { json_mode: true, vision: false, embeddings: true, logprobs: false },
      },
      {
        engine: 'vllm',
        base_url: 'http://b',
        status: 'online',
        capabilities: { json_mode: true, vision: true, embeddings: true, logprobs: true },
      },
    ])
  })
})
