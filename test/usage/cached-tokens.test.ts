import { afterAll, describe, expect, test } from 'bun:test'
import type { Job } from '../../src/modules/workers/claim'
import { makeTestApp } from '../helpers/app'
import {
  type Fleet,
  heartbeat,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  upload,
} from '../helpers/workers'

// Cached prompt tokens (docs/api.md §6 batch `usage`, §7 upload-results `usage`, §10 metrics, §14, §16):
// the prompt tokens the engines served from their cache, as each output line's
// usage.prompt_tokens_details.cached_tokens says them, summed with the other counts — through the
// real flow, on the suite's storage engine. A line that says nothing of its cache counts 0.

// Shards of 10 to 100 requests: a batch of more than 20 requests is split (docs/api.md §16).
const t = makeTestApp({ SHARD_MIN_REQUESTS: '10', SHARD_MAX_REQUESTS: '100' })
afterAll(() => t.close())

/** A chat line's usage: `prompt` tokens, `cached` of them from the cache (undefined: not reported). */
const chat = (prompt: number, cached?: number) => ({
  prompt_tokens: prompt,
  completion_tokens: 2,
  total_tokens: prompt + 2,
  ...(cached === undefined ? {} : { prompt_tokens_details: { cached_tokens: cached } }),
})

/** The counters of /metrics this feature adds. */
async function tokenCounters() {
  const text = (await t.req('GET', '/metrics')).text ?? ''
  const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1])
  return {
    prompt: value('gridkeep_prompt_tokens_total'),
    cached: value('gridkeep_cached_prompt_tokens_total'),
  }
}

let n = 0
/** A fleet with `workers` shard-capable workers and a validated batch of `requests` for their model. */
async function setup(requests: number, workers = 1) {
  const f = await makeFleet(t)
  const runtimeId = `cached-model:${++n}`
  const entry = await makeCatalogEntry(t.deps, { runtime_model_id: runtimeId })
  const ids = Array.from({ length: requests }, (_, i) => `req-${i + 1}`)
  const batch = await makeValidatedBatch(t.deps, {
    userId: f.user.id,
    model: entry.id,
    customIds: ids,
    indexed: true,
  })
  const wids: string[] = []
  for (let i = 0; i < workers; i++) {
    const wid = await registerWorker(t, f.key, {
      name: `gpu-${i}`,
      models: [runtimeId],
      max_concurrent_jobs: 4,
      capabilities: { shards: true },
    })
    expect((await heartbeat(t, f.key, wid)).status).toBe(200)
    wids.push(wid)
  }
  return { f, batch, ids, workers: wids, model: entry.id }
}

const send = (f: Fleet, wid: string, job: Job, lines: string[]) =>
  upload(t, f.key, { job_id: job.job_id, worker_id: wid, assignment_id: job.assignment_id }, lines.join('\n'))

const usageOf = async (f: Fleet, path: string) => {
  const res = await t.req('GET', `${path}?group_by=model`, { token: f.user.token })
  expect(res.status).toBe(200)
  return res.body.data
}

describe('a whole batch', () => {
  test('cached tokens are summed into the upload’s usage, the batch object, every usage view and /metrics', async () => {
    const s = await setup(4)
    const before = await tokenCounters()
    const job = (await poll(t, s.f.key, s.workers[0]!))!
    expect(job.job_id).toBe(s.batch.id)
    // Two lines with cached tokens, one with 0, one that says nothing of its cache (counts 0).
    const usages = [chat(100, 96), chat(50, 32), chat(10, 0), chat(7)]
    const res = await send(
      s.f,
      s.workers[0]!,
      job,
      s.ids.map((id, i) => okLine(id, usages[i]!)),
    )
    expect(res.status).toBe(200)
    expect(res.body.usage).toEqual({
      prompt_tokens: 167,
      completion_tokens: 8,
      total_tokens: 175,
      cached_tokens: 128,
    })
    const batch = (await t.req('GET', `/v1/batches/${s.batch.id}`, { token: s.f.user.token })).body
    expect(batch.usage).toEqual({
      input_tokens: 167,
      input_tokens_details: { cached_tokens: 128 },
      output_tokens: 8,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 175,
    })
    // The list shows the same object.
    const listed = (await t.req('GET', '/v1/batches', { token: s.f.user.token })).body.data
    expect(listed.find((b: { id: string }) => b.id === s.batch.id).usage).toEqual(batch.usage)
    const row = { model: s.model, batches: 1, requests: 4, prompt_tokens: 167, cached_tokens: 128 }
    expect(await usageOf(s.f, '/v1/usage')).toEqual([expect.objectContaining(row)])
    expect(await usageOf(s.f, `/v1/orgs/${s.f.orgId}/usage`)).toEqual([expect.objectContaining(row)])
    const after = await tokenCounters()
    expect(after).toEqual({ prompt: before.prompt + 167, cached: before.cached + 128 })

    // A repeat of the upload answers the same and counts nothing again.
    const again = await send(
      s.f,
      s.workers[0]!,
      job,
      s.ids.map((id, i) => okLine(id, usages[i]!)),
    )
    expect(again.status).toBe(200)
    expect(again.body.usage).toEqual(res.body.usage)
    expect(await tokenCounters()).toEqual(after)
  })

  test('a batch whose engine reports no cached tokens counts 0 cached tokens', async () => {
    const s = await setup(2)
    const before = await tokenCounters()
    const job = (await poll(t, s.f.key, s.workers[0]!))!
    const res = await send(
      s.f,
      s.workers[0]!,
      job,
      s.ids.map((id) => okLine(id, chat(20))),
    )
    expect(res.status).toBe(200)
    expect(res.body.usage).toEqual({ prompt_tokens: 40, completion_tokens: 4, total_tokens: 44 })
    const batch = (await t.req('GET', `/v1/batches/${s.batch.id}`, { token: s.f.user.token })).body
    expect(batch.usage.input_tokens_details).toEqual({ cached_tokens: 0 })
    expect(await usageOf(s.f, '/v1/usage')).toEqual([
      expect.objectContaining({ model: s.model, prompt_tokens: 40, cached_tokens: 0 }),
    ])
    expect(await tokenCounters()).toEqual({ prompt: before.prompt + 40, cached: before.cached })
  })

  test('the batch object has no usage before it completes', async () => {
    const s = await setup(2)
    const get = async () =>
      (await t.req('GET', `/v1/batches/${s.batch.id}`, { token: s.f.user.token })).body.usage
    expect(await get()).toBeNull()
    expect(await poll(t, s.f.key, s.workers[0]!)).not.toBeNull()
    expect(await get()).toBeNull()
  })
})

describe('a split batch (docs/api.md §16)', () => {
  test('each shard’s upload counts its own cached tokens; the batch and the usage views sum them', async () => {
    const s = await setup(60, 2)
    const before = await tokenCounters()
    // Claimed by both workers until only backup copies remain.
    const jobs: [string, Job][] = []
    for (let i = 0; ; i++) {
      const wid = s.workers[i % 2]!
      const job = await poll(t, s.f.key, wid)
      if (!job || job.backup) break
      jobs.push([wid, job])
    }
    expect(jobs.length).toBeGreaterThan(1)
    // Request k (1-based) has 10 + k prompt tokens, k of them cached; every third says nothing of its cache.
    const lineOf = (id: string) => {
      const k = Number(id.slice(4))
      return okLine(id, chat(10 + k, k % 3 === 0 ? undefined : k))
    }
    let prompt = 0
    let cached = 0
    for (const [i, [wid, job]] of jobs.entries()) {
      const ids = s.ids.slice(job.shard!.first_request, job.shard!.first_request + job.shard!.requests)
      const shardPrompt = ids.reduce((sum, id) => sum + 10 + Number(id.slice(4)), 0)
      const shardCached = ids.reduce(
        (sum, id) => sum + (Number(id.slice(4)) % 3 === 0 ? 0 : Number(id.slice(4))),
        0,
      )
      const res = await send(s.f, wid, job, ids.map(lineOf))
      expect(res.status).toBe(200)
      expect(res.body.usage).toMatchObject({ prompt_tokens: shardPrompt, cached_tokens: shardCached })
      prompt += shardPrompt
      cached += shardCached
      // Counted as each shard arrives.
      expect(await tokenCounters()).toEqual({
        prompt: before.prompt + prompt,
        cached: before.cached + cached,
      })
      const status = (await t.req('GET', `/v1/batches/${s.batch.id}`, { token: s.f.user.token })).body.status
      expect(status).toBe(i === jobs.length - 1 ? 'completed' : 'in_progress')
    }
    // Requests 1…60: 60·10 + 1830 prompt tokens; cached, the 40 not divisible by 3: 1830 − 3·(1+…+20).
    expect([prompt, cached]).toEqual([2430, 1200])
    const batch = (await t.req('GET', `/v1/batches/${s.batch.id}`, { token: s.f.user.token })).body
    expect(batch.usage).toMatchObject({ input_tokens: 2430, input_tokens_details: { cached_tokens: 1200 } })
    const row = { model: s.model, batches: 1, requests: 60, prompt_tokens: 2430, cached_tokens: 1200 }
    expect(await usageOf(s.f, '/v1/usage')).toEqual([expect.objectContaining(row)])
    // The org's view sums the shards its workers ran.
    expect(await usageOf(s.f, `/v1/orgs/${s.f.orgId}/usage`)).toEqual([expect.objectContaining(row)])
    // The join counts nothing again.
    expect(await tokenCounters()).toEqual({ prompt: before.prompt + 2430, cached: before.cached + 1200 })
  })
})
