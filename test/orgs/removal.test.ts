import { afterAll, describe, expect, test } from 'bun:test'
import { eq } from 'drizzle-orm'
import { makeTestApp } from '../helpers/app'
import { auditEntries, oneEntry } from '../helpers/audit'
import { type MadeUser, makePersonalKey, makeSuperadmin, makeUser, makeWorkerKey } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'
import {
  batchRow,
  heartbeat,
  makeCatalogEntry,
  makeValidatedBatch,
  okLine,
  poll,
  registerWorker,
  upload,
} from '../helpers/workers'

// docs/api.md §3: an owner or admin removes a worker (what it holds goes back to the queue without
// counting an attempt; its finished assignments stay as history; a daemon still running gets a 404
// and registers anew), and an owner deletes a team organization (refused while it has workers; its
// worker keys and memberships go). Each writes its audit entry (docs/api.md §17); a refused one
// writes none.

const t = makeTestApp({ RATE_LIMIT_KEYS_PER_MINUTE: '0' })
afterAll(() => t.close())

let n = 0
/** A team org owned by `owner`, with an admin, a viewer, an outsider and a worker key. */
async function team() {
  const [owner, admin, viewer, outsider] = await Promise.all([
    makeUser(t),
    makeUser(t),
    makeUser(t),
    makeUser(t),
  ])
  const org = (await t.req('POST', '/v1/orgs', { token: owner.token, body: { name: `Lab ${++n}` } })).body
    .id as string
  for (const [u, role] of [
    [admin, 'admin'],
    [viewer, 'viewer'],
  ] as const)
    expect(
      (await t.req('POST', `/v1/orgs/${org}/members`, { token: owner.token, body: { email: u.email, role } }))
        .status,
    ).toBe(201)
  const key = await makeWorkerKey(t, owner, org)
  return { org, owner, admin, viewer, outsider, key }
}

const removeWorker = (u: { token: string }, org: string, worker: string) =>
  t.req('DELETE', `/v1/orgs/${org}/workers/${worker}`, { token: u.token })
const deleteOrg = (u: { token: string }, org: string) =>
  t.req('DELETE', `/v1/orgs/${org}`, { token: u.token })
const codeOf = (res: { status: number; body: any }) => [res.status, res.body?.error?.code ?? null]
const listed = async (u: MadeUser, org: string) =>
  (await t.req('GET', `/v1/orgs/${org}/workers`, { token: u.token })).body.data.map((w: any) => w.id)

describe('DELETE /v1/orgs/{org_id}/workers/{worker_id}', () => {
  test('an admin removes an idle worker: gone from the list, its heartbeat 404, one worker.removed entry', async () => {
    const s = await team()
    const wid = await registerWorker(t, s.key.key, { name: 'gpu-a', hostname: 'gpu-a.lab' })
    expect(await listed(s.viewer, s.org)).toEqual([wid])
    const res = await removeWorker(s.admin, s.org, wid)
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ id: wid, object: 'worker', deleted: true, requeued: [] })
    expect(await listed(s.viewer, s.org)).toEqual([])
    expect(await t.deps.store.fleet.findWorker(wid)).toBeUndefined()
    const beat = await heartbeat(t, s.key.key, wid)
    expect(codeOf(beat)).toEqual([404, 'worker_not_found'])
    const entry = await oneEntry(t, s.owner, 'worker.removed', wid)
    expect(entry).toMatchObject({
      actor: { kind: 'user', id: s.admin.id, user_id: s.admin.id },
      target: { kind: 'worker', id: wid },
      org_id: s.org,
      details: { name: 'gpu-a', hostname: 'gpu-a.lab', key_id: s.key.id, requeued: [] },
    })
    // Removed twice: the second finds nothing and writes nothing.
    expect(codeOf(await removeWorker(s.admin, s.org, wid))).toEqual([404, 'worker_not_found'])
    await oneEntry(t, s.owner, 'worker.removed', wid)
  })

  test('what it holds goes back to the queue with its attempts as they were; its finished work stays as history', async () => {
    const s = await team()
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: `removal-model:${n}` })
    const wid = await registerWorker(t, s.key.key, {
      models: [`removal-model:${n}`],
      max_concurrent_jobs: 2,
    })
    expect((await heartbeat(t, s.key.key, wid)).status).toBe(200)
    // One batch finished by the worker (the org's usage counts it through its assignment) ...
    const done = await makeValidatedBatch(t.deps, { userId: s.owner.id, model: entry.id, requests: 2 })
    const first = (await poll(t, s.key.key, wid))!
    expect(first.job_id).toBe(done.id)
    const lines = `${okLine('req-1')}\n${okLine('req-2')}\n`
    expect(
      (
        await upload(
          t,
          s.key.key,
          { job_id: done.id, worker_id: wid, assignment_id: first.assignment_id },
          lines,
        )
      ).status,
    ).toBe(200)
    const usage = async () =>
      (await t.req('GET', `/v1/orgs/${s.org}/usage?group_by=model`, { token: s.owner.token })).body.data
    const before = await usage()
    expect(before).toEqual([expect.objectContaining({ batches: 1 })])
    // ... and one it holds, on its second attempt.
    const held = await makeValidatedBatch(t.deps, { userId: s.owner.id, model: entry.id, requests: 3 })
    const { db, tables } = rowsOf(t.deps)
    await db.update(tables.batches).set({ attempts: 2 }).where(eq(tables.batches.id, held.id))
    expect((await poll(t, s.key.key, wid))?.job_id).toBe(held.id)

    const res = await removeWorker(s.owner, s.org, wid)
    expect(res.status).toBe(200)
    expect(res.body.requeued).toEqual([held.id])
    // MAX_BATCH_ATTEMPTS is 3: a counted requeue would have failed it; the removal does not count.
    const back = await t.req('GET', `/v1/batches/${held.id}`, { token: s.owner.token })
    expect(back.body).toMatchObject({ status: 'validated', attempts: 2 })
    expect(back.body.error).toContain('was removed by an organization admin; not counted as an attempt')
    expect((await oneEntry(t, s.owner, 'worker.removed', wid)).details.requeued).toEqual([held.id])
    // The finished batch keeps its assignment: the org's usage still counts it.
    expect(await usage()).toEqual(before)
    expect((await batchRow(t.deps, done.id)).status).toBe('completed')

    // Another worker of the org takes the requeued batch.
    const next = await registerWorker(t, s.key.key, { models: [`removal-model:${n}`] })
    expect((await poll(t, s.key.key, next))?.job_id).toBe(held.id)
  })

  test('a daemon still running with the removed id registers anew: the same machine becomes a new worker', async () => {
    const s = await team()
    const wid = await registerWorker(t, s.key.key, { machine_id: `machine-${n}` })
    expect((await removeWorker(s.owner, s.org, wid)).status).toBe(200)
    const again = await t.req('POST', '/workers/register', {
      token: s.key.key,
      body: {
        name: 'gpu-box',
        worker_id: wid,
        machine_id: `machine-${n}`,
        runtimes: [{ engine: 'ollama', base_url: 'http://127.0.0.1:11434', status: 'online' }],
      },
    })
    expect(again.status).toBe(200)
    expect(again.body.worker_id).not.toBe(wid)
    expect(await listed(s.owner, s.org)).toEqual([again.body.worker_id])
  })

  test('who may: a viewer 403, an outsider 404, another org’s worker 404, a superadmin as owner; a refusal writes nothing', async () => {
    const s = await team()
    const other = await team()
    const wid = await registerWorker(t, s.key.key)
    const theirs = await registerWorker(t, other.key.key)
    expect(codeOf(await removeWorker(s.viewer, s.org, wid))).toEqual([403, 'insufficient_role'])
    expect(codeOf(await removeWorker(s.outsider, s.org, wid))).toEqual([404, 'org_not_found'])
    expect(codeOf(await removeWorker(s.owner, s.org, theirs))).toEqual([404, 'worker_not_found'])
    expect(codeOf(await removeWorker(s.owner, s.org, 'wrk_unknown'))).toEqual([404, 'worker_not_found'])
    expect(codeOf(await removeWorker(s.owner, 'org_unknown', wid))).toEqual([404, 'org_not_found'])
    // Only a JWT: a personal key, a worker key and no credential are 401.
    const personal = await makePersonalKey(t, s.owner)
    for (const token of [personal.key, s.key.key])
      expect((await t.req('DELETE', `/v1/orgs/${s.org}/workers/${wid}`, { token })).status).toBe(401)
    expect((await t.req('DELETE', `/v1/orgs/${s.org}/workers/${wid}`)).status).toBe(401)
    expect(await auditEntries(t, s.owner, { action: 'worker.removed', org_id: s.org })).toEqual([])
    expect(await listed(s.owner, s.org)).toEqual([wid])
    const root = await makeSuperadmin(t)
    expect((await removeWorker(root, other.org, theirs)).status).toBe(200)
    expect((await oneEntry(t, root, 'worker.removed', theirs)).actor.id).toBe(root.id)
  })
})

describe('DELETE /v1/orgs/{org_id}', () => {
  test('the owner deletes a team org without workers: its keys stop at once, its members lose it, one org.deleted entry', async () => {
    const s = await team()
    const spare = await makeWorkerKey(t, s.owner, s.org)
    // Used once, so the credential is kept in memory: the deletion must still end it at once.
    const wid = await registerWorker(t, s.key.key)
    expect((await removeWorker(s.owner, s.org, wid)).status).toBe(200)
    const res = await deleteOrg(s.owner, s.org)
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ id: s.org, object: 'organization', deleted: true })
    for (const key of [s.key.key, spare.key]) {
      const refused = await t.req('POST', '/workers/register', {
        token: key,
        body: {
          name: 'x',
          runtimes: [{ engine: 'ollama', base_url: 'http://127.0.0.1:1', status: 'online' }],
        },
      })
      expect(codeOf(refused)).toEqual([401, 'invalid_api_key'])
    }
    for (const u of [s.owner, s.admin, s.viewer]) {
      const me = await t.req('GET', '/v1/auth/me', { token: u.token })
      expect(me.body.memberships.map((m: any) => m.org_id)).toEqual([u.personalOrgId])
      expect(codeOf(await t.req('GET', `/v1/orgs/${s.org}/members`, { token: u.token }))).toEqual([
        404,
        'org_not_found',
      ])
    }
    expect(codeOf(await deleteOrg(s.owner, s.org))).toEqual([404, 'org_not_found'])
    const root = await makeSuperadmin(t)
    const entry = await oneEntry(t, root, 'org.deleted', s.org)
    expect(entry).toMatchObject({
      actor: { kind: 'user', id: s.owner.id },
      target: { kind: 'org', id: s.org },
      org_id: s.org,
      details: { name: `Lab ${n}` },
    })
    expect(entry.details.revoked_keys).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ id: s.key.id, name: 'fleet' }),
        expect.objectContaining({ id: spare.id }),
      ]),
    )
    expect(entry.details.members).toEqual(
      expect.arrayContaining([
        { user_id: s.owner.id, role: 'owner' },
        { user_id: s.admin.id, role: 'admin' },
        { user_id: s.viewer.id, role: 'viewer' },
      ]),
    )
    // The entries before it are kept: a superadmin still reads the org's history.
    await oneEntry(t, root, 'org.created', s.org)
    await oneEntry(t, root, 'worker.removed', wid)
  })

  test('refused while it has workers (409 org_has_workers), and for a Personal Org (409 personal_org); nothing changes', async () => {
    const s = await team()
    const wid = await registerWorker(t, s.key.key)
    const busy = await deleteOrg(s.owner, s.org)
    expect(codeOf(busy)).toEqual([409, 'org_has_workers'])
    expect(busy.body.error.message).toContain('remove it first')
    expect((await heartbeat(t, s.key.key, wid)).status).toBe(200)
    expect(codeOf(await deleteOrg(s.owner, s.owner.personalOrgId))).toEqual([409, 'personal_org'])
    const root = await makeSuperadmin(t)
    expect(codeOf(await deleteOrg(root, s.owner.personalOrgId))).toEqual([409, 'personal_org'])
    expect(await auditEntries(t, root, { action: 'org.deleted' })).not.toContainEqual(
      expect.objectContaining({ org_id: s.org }),
    )
    // Once its worker is removed, it goes.
    expect((await removeWorker(s.admin, s.org, wid)).status).toBe(200)
    expect((await deleteOrg(s.owner, s.org)).status).toBe(200)
  })

  test('who may: only an owner (admin and viewer 403), an outsider 404, a superadmin as owner; only a JWT', async () => {
    const s = await team()
    expect(codeOf(await deleteOrg(s.admin, s.org))).toEqual([403, 'insufficient_role'])
    expect(codeOf(await deleteOrg(s.viewer, s.org))).toEqual([403, 'insufficient_role'])
    expect(codeOf(await deleteOrg(s.outsider, s.org))).toEqual([404, 'org_not_found'])
    expect(codeOf(await deleteOrg(s.owner, 'org_unknown'))).toEqual([404, 'org_not_found'])
    const personal = await makePersonalKey(t, s.owner)
    for (const token of [personal.key, s.key.key])
      expect((await t.req('DELETE', `/v1/orgs/${s.org}`, { token })).status).toBe(401)
    expect((await t.req('DELETE', `/v1/orgs/${s.org}`)).status).toBe(401)
    expect(await auditEntries(t, s.owner, { action: 'org.deleted', org_id: s.org })).toEqual([])
    const root = await makeSuperadmin(t)
    expect((await deleteOrg(root, s.org)).status).toBe(200)
    expect((await oneEntry(t, root, 'org.deleted', s.org)).actor.id).toBe(root.id)
  })
})
