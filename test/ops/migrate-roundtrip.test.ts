import { afterAll, beforeAll, expect } from 'bun:test'
import { rmSync } from 'node:fs'
import { loadConfig } from '../../src/config'
import { createBlobStore } from '../../src/lib/blobs'
import { migrateRows } from '../../src/ops/migrate'
import { makeTestApp, type TestApp } from '../helpers/app'
import { CACHED_USAGE, populate } from '../helpers/installation'
import { freshPostgresUrl } from '../helpers/postgres'
import { postgres, testWith } from '../helpers/requires'
import { type S3Server, startS3Server } from '../helpers/s3'
import { okLine, poll, upload } from '../helpers/workers'

// docs/api.md §12 `gridkeep migrate --to … --storage …`: a populated SQLite installation with its files
// on local disk, moved to PostgreSQL and S3 (s3rver on loopback stands in for a cloud bucket),
// answers every list and every download exactly as before.

let s3: S3Server
beforeAll(async () => {
  s3 = await startS3Server()
})
afterAll(() => s3?.close())

/** A running shard's assignment id, as only its holder knows it. */
async function assignmentOf(t: TestApp, shardId: string) {
  return (await t.deps.store.queue.shardWithBatch(shardId))?.shard.assignment_id
}

async function answers(t: TestApp, tokens: string[]) {
  const out: Record<string, unknown> = {}
  const get = async (path: string, token: string) => {
    const res = await t.req('GET', path, { token })
    out[`${token.slice(-6)} ${path}`] = { status: res.status, body: res.body }
    return res.body
  }
  for (const token of tokens) {
    await get('/v1/auth/me', token)
    await get('/v1/models', token)
    await get('/v1/users/me/api-keys', token)
    const orgs = await get('/v1/orgs', token)
    for (const org of orgs.data) {
      await get(`/v1/orgs/${org.id}/members`, token)
      await get(`/v1/orgs/${org.id}/api-keys`, token)
      await get(`/v1/orgs/${org.id}/workers`, token)
    }
    // docs/api.md §14, cached prompt tokens included.
    await get('/v1/usage?group_by=model', token)
    const batches = await get('/v1/batches?limit=100', token)
    for (const b of batches.data) await get(`/v1/batches/${b.id}`, token)
    const hooks = await get('/v1/webhooks', token)
    for (const h of hooks.data) await get(`/v1/webhooks/${h.id}/deliveries`, token)
    const files = await get('/v1/files?limit=100', token)
    for (const f of files.data) {
      await get(`/v1/files/${f.id}`, token)
      const content = await t.req('GET', `/v1/files/${f.id}/content`, { token })
      out[`${token.slice(-6)} content ${f.id}`] = { status: content.status, text: content.text }
    }
  }
  return out
}

testWith(
  postgres,
  'a populated installation moved to PostgreSQL and S3 answers every list and download identically',
  async () => {
    const source = makeTestApp({ DATABASE_URL: '', STORAGE_URL: '' })
    const made = await populate(source)
    const tokens = [made.fleet.user.token, made.other.token]
    const before = await answers(source, tokens)
    expect(Object.keys(before).filter((k) => k.includes(' content ')).length).toBe(6)
    await source.deps.store.close()

    const to = await freshPostgresUrl()
    const bucket = s3.env()
    const lines: string[] = []
    const report = await migrateRows({
      databasePath: source.config.DATABASE_PATH,
      to,
      files: {
        from: source.deps.blobs,
        to: createBlobStore(loadConfig({ DATA_DIR: '/nonexistent', ...bucket })),
      },
      log: (l) => lines.push(l),
    })
    // Six files, and the done shard's output part of the split batch (docs/api.md §16).
    expect(report.files).toBe(7)
    expect(lines).toContain('copied and verified 7 files (SHA-256 of each)')

    // Another DATA_DIR: nothing of the old installation's disk is read any more.
    const target = makeTestApp({ DATABASE_URL: to, ...bucket }, { clock: source.clock })
    try {
      expect(await answers(target, tokens)).toEqual(before)
      // The split batch goes on where it stopped: the running shard's results, then the rest claimed
      // and run on the new engines, join the part of the shard done before the move.
      const { split } = made.batches
      const [shard] = (
        await target.req('GET', `/v1/batches/${split.id}/shards`, { token: made.other.token })
      ).body.data.filter((x: { status: string }) => x.status === 'running')
      const worker = (
        await target.req('GET', `/v1/orgs/${made.fleet.orgId}/workers`, { token: made.fleet.user.token })
      ).body.data.find((w: { id: string }) => w.id === shard.worker_id)
      expect(worker.name).toBe('shard-b')
      const run = async (job: { id: string; assignment: string; first: number; requests: number }) => {
        const ids = Array.from({ length: job.requests }, (_, i) => `s${job.first + i}`)
        const fields = { job_id: job.id, worker_id: worker.id, assignment_id: job.assignment }
        const lines = ids.map((id) => okLine(id, CACHED_USAGE)).join('\n')
        const res = await upload(target, made.fleet.key, fields, lines)
        expect(res.status).toBe(200)
      }
      await run({
        id: shard.id,
        assignment: (await assignmentOf(target, shard.id))!,
        first: shard.first_request,
        requests: shard.requests,
      })
      for (
        let job = await poll(target, made.fleet.key, worker.id);
        job;
        job = await poll(target, made.fleet.key, worker.id)
      ) {
        await run({
          id: job.job_id,
          assignment: job.assignment_id,
          first: job.shard!.first_request,
          requests: job.total_requests,
        })
      }
      const done = (await target.req('GET', `/v1/batches/${split.id}`, { token: made.other.token })).body
      expect(done).toMatchObject({
        status: 'completed',
        request_counts: { total: 250, completed: 250, failed: 0 },
        // The shard done before the move counts its cached tokens as the ones done after it.
        usage: { input_tokens: 250 * 5, input_tokens_details: { cached_tokens: 250 * 3 } },
      })
      const output = await target.req('GET', `/v1/files/${done.output_file_id}/content`, {
        token: made.other.token,
      })
      expect(
        output.text
          .split('\n')
          .filter(Boolean)
          .map((l: string) => JSON.parse(l).custom_id),
      ).toEqual(Array.from({ length: 250 }, (_, i) => `s${i}`))
    } finally {
      target.close()
      rmSync(source.config.DATA_DIR, { recursive: true, force: true })
    }
  },
  120_000,
)
