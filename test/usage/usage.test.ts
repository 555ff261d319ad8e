import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { DAY } from '../../src/store/usage'
import { makeTestApp } from '../helpers/app'
import { jsonl, line, makeBatch, validateAll } from '../helpers/batches'
import { type MadeUser, makePersonalKey, makeSuperadmin, makeUser, makeWorkerKey } from '../helpers/builders'
import {
  errorLine,
  heartbeat,
  makeCatalogEntry,
  okLine,
  poll,
  registerWorker,
  upload,
} from '../helpers/workers'

// docs/api.md §14 usage, built through the real flow (upload, create, validate, poll, upload-results):
// what each view reports equals the sums over the output files' response.body.usage.

// The test spans several days of the clock: logins must outlive it.
const t = makeTestApp({ JWT_TTL_SECONDS: String(31 * DAY) })
afterAll(() => t.close())

// Noon UTC of a day: the batches below complete on two consecutive UTC days.
const DAY1 = Math.floor(t.clock.now() / DAY) * DAY + DAY
const DAY2 = DAY1 + DAY
const RANGE = { start: DAY1, end: DAY1 + 2 * DAY }

interface Fleet {
  key: string
  workerId: string
}
interface Done {
  id: string
  model: string
  owner: string
  keyPrefix: string
  /** The org whose worker ran it. */
  orgId: string
  completed_at: number
  requests: number
}

let alice: MadeUser
let bob: MadeUser
let carol: MadeUser
let ops: MadeUser
let admin: MadeUser
let aliceKey: { id: string; key: string; prefix: string }
let labId: string
let lab: Fleet
let bobs: Fleet
let modelA: string
let modelB: string
const done: Done[] = []

async function fleet(owner: MadeUser, orgId: string, name: string): Promise<Fleet> {
  const { key } = await makeWorkerKey(t, owner, orgId)
  const workerId = await registerWorker(t, key, {
    name,
    machine_id: name,
    models: ['usage-a:7b', 'usage-b:7b'],
  })
  return { key, workerId }
}

/** One batch from upload to completed: `results` gives each request's usage (null: an error line). */
async function run(
  owner: MadeUser,
  credential: string,
  keyPrefix: string,
  on: Fleet & { orgId: string },
  model: string,
  results: (Record<string, unknown> | null)[],
) {
  const ids = results.map((_, i) => `r${i + 1}`)
  const batch = await makeBatch(t, { token: credential }, jsonl(ids.map((id) => line(id, model))))
  await validateAll(t)
  expect((await heartbeat(t, on.key, on.workerId)).status).toBe(200)
  const job = await poll(t, on.key, on.workerId)
  expect(job?.job_id).toBe(batch.id)
  t.clock.advance(60)
  const out = results.map((u, i) => (u ? okLine(ids[i]!, u as never) : errorLine(ids[i]!)))
  const completed = results.filter(Boolean).length
  const res = await upload(
    t,
    on.key,
    {
      worker_id: on.workerId,
      job_id: batch.id,
      assignment_id: job!.assignment_id,
      completed,
      failed: results.length - completed,
    },
    jsonl(out),
  )
  expect(res.status).toBe(200)
  done.push({
    id: batch.id,
    model,
    owner: owner.id,
    keyPrefix,
    orgId: on.orgId,
    completed_at: t.clock.now(),
    requests: completed,
  })
}

/** A chat line's usage; `cached` as the engines report it (none: an engine that says nothing of its cache). */
const usage = (p: number, c: number, cached?: number) => ({
  prompt_tokens: p,
  completion_tokens: c,
  total_tokens: p + c,
  ...(cached === undefined ? {} : { prompt_tokens_details: { cached_tokens: cached } }),
})

beforeAll(async () => {
  ;[alice, bob, carol, ops, admin] = await Promise.all([
    makeUser(t),
    makeUser(t),
    makeUser(t),
    makeUser(t),
    makeSuperadmin(t),
  ])
  const made = await makePersonalKey(t, alice, { name: 'laptop' })
  aliceKey = { ...made, prefix: made.key.slice(0, 12) }
  modelA = (await makeCatalogEntry(t.deps, { id: 'usage-a-q4km', runtime_model_id: 'usage-a:7b' })).id
  modelB = (await makeCatalogEntry(t.deps, { id: 'usage-b-q4km', runtime_model_id: 'usage-b:7b' })).id
  // The lab: ops owns it, bob is an admin, carol a viewer; its worker runs most of the work.
  labId = (await t.req('POST', '/v1/orgs', { token: ops.token, body: { name: 'Lab' } })).body.id
  for (const [who, role] of [
    [bob, 'admin'],
    [carol, 'viewer'],
  ] as const) {
    const res = await t.req('POST', `/v1/orgs/${labId}/members`, {
      token: ops.token,
      body: { email: who.email, role },
    })
    expect(res.status).toBe(201)
  }
  lab = await fleet(ops, labId, 'lab-1')
  bobs = await fleet(bob, bob.personalOrgId, 'bob-1')
  const inLab = { ...lab, orgId: labId }
  const atBob = { ...bobs, orgId: bob.personalOrgId }

  t.clock.set(DAY1 + 10 * 3600)
  await run(alice, aliceKey.key, aliceKey.prefix, inLab, modelA, [
    usage(10, 20, 8),
    usage(3, 4),
    null,
    usage(7, 0, 0),
  ])
  await run(alice, alice.token, 'dashboard', inLab, modelB, [usage(100, 50, 96), usage(1, 1)])
  t.clock.set(DAY2 + 9 * 3600)
  await run(alice, aliceKey.key, aliceKey.prefix, atBob, modelA, [usage(5, 5, 4), usage(6, 6, 5)])
  // An embedding-like answer: prompt and total only.
  await run(bob, bob.token, 'dashboard', inLab, modelA, [{ prompt_tokens: 40, total_tokens: 40 }])
  // Neither counts: a batch that failed validation, one still running.
  const bad = await makeBatch(t, alice, jsonl(['{"custom_id": 1}']))
  await validateAll(t)
  expect((await t.req('GET', `/v1/batches/${bad.id}`, { token: alice.token })).body.status).toBe('failed')
  await makeBatch(t, alice, jsonl([line('x', modelA)]))
  await validateAll(t)
  expect((await heartbeat(t, lab.key, lab.workerId)).status).toBe(200)
  expect(await poll(t, lab.key, lab.workerId)).not.toBeNull()
  t.clock.advance(3600)
})

// ---------------------------------------------------------------------------------------------
// What the output files say.

type Sums = {
  batches: number
  requests: number
  prompt_tokens: number
  cached_tokens: number
  completion_tokens: number
  total_tokens: number
}
const zero = (): Sums => ({
  batches: 0,
  requests: 0,
  prompt_tokens: 0,
  cached_tokens: 0,
  completion_tokens: 0,
  total_tokens: 0,
})

/** The sums over one batch's output file, read back through the API as its owner. */
async function fromOutput(b: Done): Promise<Sums> {
  const owner = [alice, bob].find((u) => u.id === b.owner)!
  const batch = (await t.req('GET', `/v1/batches/${b.id}`, { token: owner.token })).body
  expect(batch.status).toBe('completed')
  const content = await t.req('GET', `/v1/files/${batch.output_file_id}/content`, { token: owner.token })
  const sums = zero()
  sums.batches = 1
  for (const text of content.text.trim().split('\n')) {
    const u = JSON.parse(text).response.body.usage
    sums.requests++
    for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens'] as const) sums[k] += u[k] ?? 0
    sums.cached_tokens += u.prompt_tokens_details?.cached_tokens ?? 0
  }
  expect(sums.requests).toBe(b.requests)
  // docs/api.md §6: the batch object carries the same sums, in OpenAI's shape.
  expect(batch.usage).toEqual({
    input_tokens: sums.prompt_tokens,
    input_tokens_details: { cached_tokens: sums.cached_tokens },
    output_tokens: sums.completion_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: sums.total_tokens,
  })
  return sums
}

function add(into: Sums, s: Sums) {
  for (const k of Object.keys(into) as (keyof Sums)[]) into[k] += s[k]
}

/** The expected list: output sums grouped by `keyOf`, with `fields(key)` naming the group. */
async function expected(
  batches: Done[],
  keyOf: (b: Done) => string,
  fields: (key: string) => Record<string, unknown>,
) {
  const groups = new Map<string, Sums>()
  for (const b of batches) {
    const k = keyOf(b)
    if (!groups.has(k)) groups.set(k, zero())
    add(groups.get(k)!, await fromOutput(b))
  }
  return [...groups].map(([k, s]) => ({ ...RANGE, ...fields(k), ...s }))
}

const byTokens = <T extends { total_tokens: number }>(rows: T[]) =>
  rows.toSorted((x, y) => y.total_tokens - x.total_tokens)

async function list(path: string, token: string, q: Record<string, string | number> = {}) {
  const qs = new URLSearchParams(
    Object.entries({ ...RANGE, ...q }).map(([k, v]): [string, string] => [k, String(v)]),
  )
  const res = await t.req('GET', `${path}?${qs}`, { token })
  expect(res.status).toBe(200)
  expect(res.body.object).toBe('list')
  return res.body.data as Record<string, unknown>[]
}

const dayOf = (b: Done) => String(Math.floor(b.completed_at / DAY) * DAY)
const daily = async (batches: Done[]) => {
  const rows = await expected(batches, dayOf, (d) => ({ start: Number(d), end: Number(d) + DAY }))
  return rows.sort((x, y) => x.start - y.start)
}

describe('GET /v1/usage (the caller’s batches)', () => {
  const mine = () => done.filter((b) => b.owner === alice.id)

  test('per UTC day: the sums over the output files, with a JWT or a personal key alike', async () => {
    const want = await daily(mine())
    expect(want).toHaveLength(2)
    expect(await list('/v1/usage', alice.token)).toEqual(want)
    expect(await list('/v1/usage', aliceKey.key, { group_by: 'day' })).toEqual(want)
  })

  test('per model', async () => {
    const want = await expected(
      mine(),
      (b) => b.model,
      (model) => ({ model }),
    )
    expect(await list('/v1/usage', alice.token, { group_by: 'model' })).toEqual(byTokens(want))
  })

  test('per creating key: its prefix, or "dashboard" for batches created with a JWT', async () => {
    const want = await expected(
      mine(),
      (b) => b.keyPrefix,
      (prefix) =>
        prefix === 'dashboard'
          ? { key_prefix: 'dashboard', key_id: null, key_name: null }
          : { key_prefix: prefix, key_id: aliceKey.id, key_name: 'laptop' },
    )
    expect(want).toHaveLength(2)
    expect(await list('/v1/usage', alice.token, { group_by: 'key' })).toEqual(byTokens(want))
    // A revoked key keeps its row: its batches still show under its prefix.
    expect(
      (await t.req('DELETE', `/v1/users/me/api-keys/${aliceKey.id}`, { token: alice.token })).status,
    ).toBe(200)
    expect(await list('/v1/usage', alice.token, { group_by: 'key' })).toEqual(byTokens(want))
  })

  test('day rows cover every UTC day the range touches, clipped to it, days without work included', async () => {
    const rows = await list('/v1/usage', alice.token, { start: DAY1 - DAY + 3600, end: DAY2 + 12 * 3600 })
    const [d1, d2] = await daily(mine())
    expect(rows).toEqual([
      { start: DAY1 - DAY + 3600, end: DAY1, ...zero() },
      d1,
      { ...d2, end: DAY2 + 12 * 3600 },
    ])
    // Half-open: a range ending where day 2's work happened leaves it out.
    const early = await list('/v1/usage', alice.token, { start: DAY2, end: done[2]!.completed_at })
    expect(early).toEqual([{ start: DAY2, end: done[2]!.completed_at, ...zero() }])
  })

  test('by default the 30 UTC days ending with today', async () => {
    const res = await t.req('GET', '/v1/usage', { token: alice.token })
    expect(res.status).toBe(200)
    const today = Math.floor(t.clock.now() / DAY) * DAY
    expect(res.body.data).toHaveLength(30)
    expect(res.body.data[0].start).toBe(today - 29 * DAY)
    expect(res.body.data.at(-1).end).toBe(today + DAY)
    const total = (res.body.data as Sums[]).reduce((n, r) => n + r.total_tokens, 0)
    const want = (await daily(mine())).reduce((n, r) => n + r.total_tokens, 0)
    expect(total).toBe(want)
  })

  test('another user sees only their own', async () => {
    const want = await daily(done.filter((b) => b.owner === bob.id))
    expect(await list('/v1/usage', bob.token)).toEqual([
      ...(want[0]!.start === DAY1 ? [] : [{ start: DAY1, end: DAY2, ...zero() }]),
      ...want,
    ])
    expect(await list('/v1/usage', carol.token, { group_by: 'model' })).toEqual([])
  })
})

describe('GET /v1/orgs/{org_id}/usage (the work its workers ran)', () => {
  test('an owner and an admin see the work of the org’s workers, whoever owned the batches', async () => {
    const ran = done.filter((b) => b.orgId === labId)
    expect(new Set(ran.map((b) => b.owner)).size).toBe(2)
    const want = await daily(ran)
    expect(await list(`/v1/orgs/${labId}/usage`, ops.token)).toEqual(want)
    expect(await list(`/v1/orgs/${labId}/usage`, bob.token)).toEqual(want)
    const models = await expected(
      ran,
      (b) => b.model,
      (model) => ({ model }),
    )
    expect(await list(`/v1/orgs/${labId}/usage`, ops.token, { group_by: 'model' })).toEqual(byTokens(models))
    // Bob's personal org ran alice's day-2 batch only.
    const bobsRan = await expected(
      done.filter((b) => b.orgId === bob.personalOrgId),
      (b) => b.model,
      (model) => ({ model }),
    )
    expect(await list(`/v1/orgs/${bob.personalOrgId}/usage`, bob.token, { group_by: 'model' })).toEqual(
      bobsRan,
    )
  })

  test('a viewer gets 403, a non-member 404, a personal key 401, a superadmin the view', async () => {
    const path = `/v1/orgs/${labId}/usage`
    const viewer = await t.req('GET', path, { token: carol.token })
    expect([viewer.status, viewer.body.error.code]).toEqual([403, 'insufficient_role'])
    const stranger = await t.req('GET', path, { token: alice.token })
    expect([stranger.status, stranger.body.error.code]).toEqual([404, 'org_not_found'])
    const unknown = await t.req('GET', '/v1/orgs/org_nope/usage', { token: ops.token })
    expect(unknown.status).toBe(404)
    const key = await makePersonalKey(t, ops)
    expect((await t.req('GET', path, { token: key.key })).status).toBe(401)
    expect(await list(path, admin.token)).toEqual(await daily(done.filter((b) => b.orgId === labId)))
  })
})

describe('GET /v1/admin/usage (everyone)', () => {
  test('per day, model, key and user over every user’s batches', async () => {
    expect(await list('/v1/admin/usage', admin.token)).toEqual(await daily(done))
    const models = await expected(
      done,
      (b) => b.model,
      (model) => ({ model }),
    )
    expect(await list('/v1/admin/usage', admin.token, { group_by: 'model' })).toEqual(byTokens(models))
    const users = await expected(
      done,
      (b) => b.owner,
      (id) => ({ user_id: id, email: [alice, bob].find((u) => u.id === id)!.email }),
    )
    expect(await list('/v1/admin/usage', admin.token, { group_by: 'user' })).toEqual(byTokens(users))
    const keys = (await list('/v1/admin/usage', admin.token, { group_by: 'key' })).map((r) => r.key_prefix)
    expect(keys.toSorted()).toEqual(['dashboard', aliceKey.prefix].toSorted())
  })

  test('a user who is not a superadmin gets 403; a personal key 401', async () => {
    expect((await t.req('GET', '/v1/admin/usage', { token: alice.token })).status).toBe(403)
    const key = await makePersonalKey(t, bob)
    expect((await t.req('GET', '/v1/admin/usage', { token: key.key })).status).toBe(401)
  })
})

describe('bad input is a 400 in the envelope, naming the parameter', () => {
  const cases: [string, string, string, string][] = [
    ['/v1/usage', 'start=abc', 'start', 'invalid_value'],
    ['/v1/usage', 'start=1.5', 'start', 'invalid_value'],
    ['/v1/usage', 'start=-1', 'start', 'invalid_value'],
    ['/v1/usage', 'end=1e9', 'end', 'invalid_value'],
    ['/v1/usage', 'end=', 'end', 'invalid_value'],
    ['/v1/usage', 'end=99999999999999999999', 'end', 'invalid_value'],
    ['/v1/usage', `start=${DAY2}&end=${DAY1}`, 'start', 'invalid_range'],
    ['/v1/usage', `start=${DAY1}&end=${DAY1}`, 'start', 'invalid_range'],
    ['/v1/usage', `start=${DAY1}&end=${DAY1 + 366 * DAY + 1}`, 'end', 'range_too_long'],
    ['/v1/usage', 'group_by=week', 'group_by', 'invalid_value'],
    ['/v1/usage', 'group_by=user', 'group_by', 'invalid_value'],
    ['/v1/orgs/LAB/usage', 'group_by=key', 'group_by', 'invalid_value'],
    ['/v1/admin/usage', 'group_by=org', 'group_by', 'invalid_value'],
  ]
  for (const [path, q, param, code] of cases) {
    test(`${path}?${q}`, async () => {
      const token = path.startsWith('/v1/admin')
        ? admin.token
        : path.includes('LAB')
          ? ops.token
          : alice.token
      const res = await t.req('GET', `${path.replace('LAB', labId)}?${q}`, { token })
      expect(res.status).toBe(400)
      expect(res.body.error).toMatchObject({ type: 'invalid_request_error', code, param })
    })
  }

  test('the longest range, 366 days, is allowed; an unknown parameter is refused', async () => {
    const year = await t.req('GET', `/v1/usage?start=${DAY1}&end=${DAY1 + 366 * DAY}`, { token: alice.token })
    expect([year.status, year.body.data.length]).toEqual([200, 366])
    const unknown = await t.req('GET', '/v1/usage?from=1', { token: alice.token })
    expect(unknown.status).toBe(400)
    expect(unknown.body.error.type).toBe('invalid_request_error')
  })
})
