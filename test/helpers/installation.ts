import { expect } from 'bun:test'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import type { TestApp } from './app'
import { jsonl, line, makeBatch, validateAll } from './batches'
import { makePersonalKey, makeUser } from './builders'
import {
  errorLine,
  heartbeat,
  makeCatalogEntry,
  makeFleet,
  okLine,
  poll,
  registerWorker,
  upload,
} from './workers'

/** An answered line's usage as the engines report it, with prompt tokens served from their cache. */
export const CACHED_USAGE = {
  prompt_tokens: 5,
  completion_tokens: 7,
  total_tokens: 12,
  prompt_tokens_details: { cached_tokens: 3 },
}

/**
 * An installation with something of everything, made through the API: users, a team org with a
 * member, personal and worker keys, catalogue entries, uploaded files, a completed batch (output and
 * error files), a batch failed by validation (stored errors), a validated one waiting, a worker with
 * its child rows. For `gridkeep migrate` and the tests that compare engines.
 */
export async function populate(t: TestApp) {
  const fleet = await makeFleet(t)
  const other = await makeUser(t, { full_name: 'Other Person' })
  await makePersonalKey(t, other, { name: 'scripts' })
  const team = await t.req('POST', '/v1/orgs', { token: fleet.user.token, body: { name: 'Vision Lab' } })
  expect(team.status).toBe(201)
  expect(
    (
      await t.req('POST', `/v1/orgs/${team.body.id}/members`, {
        token: fleet.user.token,
        body: { email: other.email, role: 'viewer' },
      })
    ).status,
  ).toBeLessThan(300)
  const entry = await makeCatalogEntry(t.deps, {
    id: 'migrate-8b-q4km',
    runtime: 'ollama',
    runtime_model_id: 'm:8b',
  })
  await makeCatalogEntry(t.deps, {
    id: 'other-8b-q4km',
    runtime: 'ollama',
    runtime_model_id: 'o:8b',
    vram_gb: null,
  })

  // docs/api.md §2 "Single sign-on": an identity linked to an account, and a sign-in under way
  // (written through the store: no provider is needed to hold them).
  await t.deps.store.sso.link(
    other.id,
    { issuer: 'https://idp.example.test/realms/lab', subject: 'other-subject', email: other.email },
    t.clock.now(),
    undefined,
    SYSTEM_AUDIT,
  )
  await t.deps.store.sso.startLogin({
    state_hash: 'a'.repeat(64),
    nonce: 'populated-nonce',
    code_verifier: 'v'.repeat(43),
    return_to: '/app/keys',
    redirect_uri: null,
    client_state: null,
    code_challenge: null,
    browser_hash: 'b'.repeat(64),
    created_at: t.clock.now(),
    expires_at: t.clock.now() + 600,
  })

  // A webhook (written through the store: its loopback-free URL needs no resolver here), so the
  // batches below leave events in its outbox.
  await t.deps.store.webhooks.createWebhook({
    id: 'wh_populated',
    user_id: fleet.user.id,
    url: 'https://hooks.example.test/gridkeep',
    secret: `whsec_${Buffer.alloc(24, 5).toString('base64')}`,
    events: ['batch.validated', 'batch.completed', 'batch.failed'],
    created_at: t.clock.now(),
  })

  const done = await makeBatch(
    t,
    fleet.user,
    jsonl(['a', 'b', 'c'].map((id) => line(id, entry.id, { body: { model: entry.id, messages: [] } }))),
    { metadata: { project: 'migrate' } },
  )
  const failed = await makeBatch(t, other, jsonl(['{not json', line('x', 'no-such-model')]))
  const waiting = await makeBatch(t, other, jsonl([line('w', 'other-8b-q4km')]))
  await validateAll(t)

  const workerId = await registerWorker(t, fleet.key, { models: ['m:8b'] })
  expect((await heartbeat(t, fleet.key, workerId, { loaded_models: ['m:8b'] })).status).toBe(200)
  // docs/api.md §7 model-progress `failed`: the worker backs off from a download that failed.
  const now = t.clock.now()
  await t.deps.store.fleet.setPullFailure({
    catalog_id: 'other-8b-q4km',
    worker_id: workerId,
    runtime: 'ollama',
    runtime_model_id: 'o:8b',
    pin: 'f'.repeat(32),
    failures: 2,
    error: 'ollama pull failed: file does not exist',
    failed_at: now,
    retry_at: now + 1200,
  })
  const job = await poll(t, fleet.key, workerId)
  expect(job?.job_id).toBe(done.id)
  const res = await upload(
    t,
    fleet.key,
    { job_id: done.id, worker_id: workerId, assignment_id: job!.assignment_id },
    [okLine('a', CACHED_USAGE), okLine('b', CACHED_USAGE), errorLine('c')].join('\n'),
  )
  expect(res.status).toBe(200)

  // A split batch in progress (docs/api.md §16): one shard done (its parts not joined yet), one running.
  const split = await makeBatch(
    t,
    other,
    jsonl(Array.from({ length: 250 }, (_, i) => line(`s${i}`, entry.id))),
  )
  await validateAll(t)
  const shardWorkers: string[] = []
  for (const name of ['shard-a', 'shard-b']) {
    const wid = await registerWorker(t, fleet.key, { name, models: ['m:8b'], capabilities: { shards: true } })
    expect((await heartbeat(t, fleet.key, wid)).status).toBe(200)
    shardWorkers.push(wid)
  }
  const [first, second] = [
    await poll(t, fleet.key, shardWorkers[0]!),
    await poll(t, fleet.key, shardWorkers[1]!),
  ]
  expect(first?.shard?.requests).toBe(125)
  expect(second?.batch_id).toBe(split.id)
  const shardIds = Array.from({ length: 125 }, (_, i) => `s${i}`)
  const shardUpload = await upload(
    t,
    fleet.key,
    { job_id: first!.job_id, worker_id: shardWorkers[0]!, assignment_id: first!.assignment_id },
    shardIds.map((id) => okLine(id, CACHED_USAGE)).join('\n'),
  )
  expect(shardUpload.status).toBe(200)
  return { fleet, other, batches: { done, failed, waiting, split }, workerId }
}
