import { afterAll, beforeAll, expect } from 'bun:test'
import { rmSync } from 'node:fs'
import { loadConfig } from '../../src/config'
import { createBlobStore } from '../../src/lib/blobs'
import { migrateRows } from '../../src/ops/migrate'
import { makeTestApp, type TestApp } from '../helpers/app'
import { populate } from '../helpers/installation'
import { freshPostgresUrl } from '../helpers/postgres'
import { postgres, testWith } from '../helpers/requires'
import { type S3Server, startS3Server } from '../helpers/s3'

// API.md §12 `gridkeep migrate --to … --storage …`: a populated SQLite installation with its files
// on local disk, moved to PostgreSQL and S3 (s3rver on loopback stands in for a cloud bucket),
// answers every list and every download exactly as before.

let s3: S3Server
beforeAll(async () => {
  s3 = await startS3Server()
})
afterAll(() => s3?.close())

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
    expect(Object.keys(before).filter((k) => k.includes(' content ')).length).toBe(5)
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
    expect(report.files).toBe(5)
    expect(lines).toContain('copied and verified 5 files (SHA-256 of each)')

    // Another DATA_DIR: nothing of the old installation's disk is read any more.
    const target = makeTestApp({ DATABASE_URL: to, ...bucket }, { clock: source.clock })
    try {
      expect(await answers(target, tokens)).toEqual(before)
    } finally {
      target.close()
      rmSync(source.config.DATA_DIR, { recursive: true, force: true })
    }
  },
  120_000,
)
