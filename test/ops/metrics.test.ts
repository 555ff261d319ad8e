import { afterAll, describe, expect, test } from 'bun:test'
import type { batches } from '../../src/db/schema'
import { newId } from '../../src/lib/ids'
import { allRequestsRecorded, makeTestApp, type TestApp } from '../helpers/app'
import { makeUser } from '../helpers/builders'
import { rowsOf } from '../helpers/rows'

// GET /metrics (issue 6, docs/api.md §10): Prometheus text with HTTP requests by route pattern, method and
// status, latency histograms, and gauges computed from the database at scrape time.

const apps: TestApp[] = []
afterAll(() => {
  for (const a of apps) a.close()
})
const app = (env: Record<string, string> = {}) => {
  const a = makeTestApp(env)
  apps.push(a)
  return a
}

/** `name{labels} value` lines of an exposition, as a map. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>()
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue
    const at = line.lastIndexOf(' ')
    out.set(line.slice(0, at), Number(line.slice(at + 1)))
  }
  return out
}

async function insertBatch(t: TestApp, userId: string, status: (typeof batches.$inferInsert)['status']) {
  const now = t.clock.now()
  const { db, tables } = rowsOf(t.deps)
  await db.insert(tables.batches).values({
    id: newId('batch_'),
    user_id: userId,
    input_file_id: 'file-x',
    endpoint: '/v1/chat/completions',
    completion_window: '24h',
    status,
    created_at: now,
    updated_at: now,
  })
}

async function insertWorker(
  t: TestApp,
  orgId: string,
  w: { status: 'online' | 'offline'; activity: 'idle' | 'busy' | 'downloading_model'; seenAgo: number },
) {
  const now = t.clock.now()
  const { db, tables } = rowsOf(t.deps)
  await db.insert(tables.workers).values({
    id: newId('wrk_'),
    org_id: orgId,
    name: 'gpu',
    status: w.status,
    activity: w.activity,
    registered_at: now - 1000,
    last_seen_at: now - w.seenAgo,
  })
}

describe('GET /metrics', () => {
  test('Prometheus text: HTTP requests by route pattern, method and status, with latency histograms', async () => {
    const t = app()
    // Checking the password takes 0.3 s of the injected clock: the login's latency.
    const verify = t.deps.passwords.verify
    t.deps.passwords.verify = async (...args) => {
      t.clock.advance(0.3)
      return verify(...args)
    }
    const user = await makeUser(t)
    await t.req('GET', '/v1/orgs/org_doesnotexist123/api-keys', { token: user.token })
    await t.req('GET', '/no/such/path/abc123')
    await t.req('GET', '/v1/auth/me')
    await t.req('POST', '/v1/auth/signup', { body: { email: 'nope' } })
    await allRequestsRecorded(t.deps)

    const res = await t.req('GET', '/metrics')
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8')
    const s = samples(res.text)
    const req = (method: string, route: string, status: number) =>
      s.get(`gridkeep_http_requests_total{method="${method}",route="${route}",status="${status}"}`)
    expect(req('POST', '/v1/auth/signup', 200)).toBe(1)
    expect(req('POST', '/v1/auth/signup', 400)).toBe(1)
    expect(req('POST', '/v1/auth/login', 200)).toBe(1)
    expect(req('GET', '/v1/auth/me', 401)).toBe(1)
    // The route pattern, never the raw path: ids and unknown paths do not create series.
    expect(req('GET', '/v1/orgs/:org_id/api-keys', 404)).toBe(1)
    expect(req('GET', 'unmatched', 404)).toBe(1)
    expect(res.text).not.toContain('org_doesnotexist123')
    expect(res.text).not.toContain('abc123')

    const h = (suffix: string, extra = '') =>
      s.get(
        `gridkeep_http_request_duration_seconds_${suffix}{${extra}method="POST",route="/v1/auth/login",status="200"}`,
      )
    expect(h('count')).toBe(1)
    expect(h('sum')).toBe(0.3)
    expect(h('bucket', 'le="0.25",')).toBe(0)
    expect(h('bucket', 'le="0.5",')).toBe(1)
    expect(h('bucket', 'le="+Inf",')).toBe(1)
    expect(res.text).toContain('# TYPE gridkeep_http_requests_total counter')
    expect(res.text).toContain('# TYPE gridkeep_http_request_duration_seconds histogram')
  })

  test('a method outside the usual set is counted as OTHER, never under its own name', async () => {
    const t = app()
    await t.req('PROPFIND', '/v1/models')
    await t.req('MKCOL', '/v1/files')
    await allRequestsRecorded(t.deps)
    const text = (await t.req('GET', '/metrics')).text
    const s = samples(text)
    expect(s.get('gridkeep_http_requests_total{method="OTHER",route="unmatched",status="404"}')).toBe(2)
    expect(text).not.toContain('PROPFIND')
    expect(text).not.toContain('MKCOL')
  })

  test('counters of the other modules and the build are exposed under Prometheus names', async () => {
    const t = app()
    t.deps.metrics.claims.inc()
    t.deps.metrics.requeues.inc({ reason: 'worker_silent', outcome: 'requeued' })
    const text = (await t.req('GET', '/metrics')).text
    const s = samples(text)
    expect(s.get('gridkeep_batch_claims_total')).toBe(1)
    expect(s.get('gridkeep_batch_requeues_total{reason="worker_silent",outcome="requeued"}')).toBe(1)
    for (const name of [
      'gridkeep_validation_lines_total',
      'gridkeep_sweeper_passes_total',
      'gridkeep_sse_streams_open',
      'gridkeep_batches',
      'gridkeep_workers',
    ])
      expect(text).toContain(`# TYPE ${name} `)
    expect(
      s.get(
        `gridkeep_build_info{version="${(await import('../../package.json')).version}",bun_version="${Bun.version}"}`,
      ),
    ).toBe(1)
    // Every metric name follows the conventions: gridkeep_ prefix, snake case, _total only on counters.
    for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
      if (!m[1]!.startsWith('gridkeep_')) continue
      expect(m[1]).toMatch(/^[a-z_]+$/)
      expect(m[1]!.endsWith('_total')).toBe(m[2] === 'counter')
    }
  })

  test('batch and worker gauges are computed from the database at scrape time', async () => {
    const t = app()
    const user = await makeUser(t)
    await insertBatch(t, user.id, 'validating')
    await insertBatch(t, user.id, 'validating')
    await insertBatch(t, user.id, 'in_progress')
    await insertBatch(t, user.id, 'failed')
    await insertWorker(t, user.personalOrgId, { status: 'online', activity: 'busy', seenAgo: 10 })
    await insertWorker(t, user.personalOrgId, { status: 'online', activity: 'idle', seenAgo: 119 })
    // Stored online but silent past HEARTBEAT_TIMEOUT_SECONDS: offline at read time.
    await insertWorker(t, user.personalOrgId, { status: 'online', activity: 'busy', seenAgo: 120 })
    await insertWorker(t, user.personalOrgId, { status: 'offline', activity: 'idle', seenAgo: 5 })

    let s = samples((await t.req('GET', '/metrics')).text)
    expect(s.get('gridkeep_batches{status="validating"}')).toBe(2)
    expect(s.get('gridkeep_batches{status="validated"}')).toBe(0)
    expect(s.get('gridkeep_batches{status="in_progress"}')).toBe(1)
    expect(s.get('gridkeep_batches{status="completed"}')).toBe(0)
    expect(s.get('gridkeep_batches{status="failed"}')).toBe(1)
    expect(s.get('gridkeep_workers{status="online",activity="busy"}')).toBe(1)
    expect(s.get('gridkeep_workers{status="online",activity="idle"}')).toBe(1)
    expect(s.get('gridkeep_workers{status="online",activity="downloading_model"}')).toBe(0)
    expect(s.get('gridkeep_workers{status="offline",activity="busy"}')).toBe(1)
    expect(s.get('gridkeep_workers{status="offline",activity="idle"}')).toBe(1)

    // The next scrape sees the new state: time passes, the idle worker falls silent.
    t.clock.advance(1)
    await insertBatch(t, user.id, 'completed')
    s = samples((await t.req('GET', '/metrics')).text)
    expect(s.get('gridkeep_batches{status="completed"}')).toBe(1)
    expect(s.get('gridkeep_workers{status="online",activity="idle"}')).toBe(0)
    expect(s.get('gridkeep_workers{status="offline",activity="idle"}')).toBe(2)
  })

  test('open by default: any Authorization header is ignored', async () => {
    const t = app()
    expect((await t.req('GET', '/metrics')).status).toBe(200)
    expect((await t.req('GET', '/metrics', { token: 'garbage' })).status).toBe(200)
  })

  test('METRICS_TOKEN set: Bearer <token> required, else a 401 envelope', async () => {
    const token = 'metrics-token-0123456789'
    const t = app({ METRICS_TOKEN: token })
    const user = await makeUser(t)
    for (const headers of <Record<string, string>[]>[
      {},
      { authorization: 'Bearer wrong-token' },
      { authorization: `Bearer ${token}x` },
      { authorization: `Basic ${token}` },
      { authorization: token },
      { authorization: `Bearer ${user.token}` }, // a user's JWT is not the metrics token
    ]) {
      const res = await t.req('GET', '/metrics', { headers })
      expect(res.status).toBe(401)
      expect(res.body.error.type).toBe('authentication_error')
      expect(Object.keys(res.body.error).sort()).toEqual(['code', 'message', 'param', 'type'])
      expect(res.text).not.toContain('gridkeep_')
    }
    const ok = await t.req('GET', '/metrics', { token })
    expect(ok.status).toBe(200)
    expect(ok.text).toContain('gridkeep_http_requests_total')
    // The refusals are counted like any request.
    await allRequestsRecorded(t.deps)
    const counted = samples((await t.req('GET', '/metrics', { token })).text)
    expect(counted.get('gridkeep_http_requests_total{method="GET",route="/metrics",status="401"}')).toBe(6)
    expect(counted.get('gridkeep_http_requests_total{method="GET",route="/metrics",status="200"}')).toBe(1)
  })
})
