import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { scratchKey } from '../../src/lib/blobs'
import { newId } from '../../src/lib/ids'
import { startTestServer } from '../helpers/app'
import { blobExists, writeBlob } from '../helpers/blobs'
import { baseEnv, dataDirs, spawnServer } from '../helpers/ops'
import { type S3Server, startS3Server } from '../helpers/s3'

// The start and the blob store (docs/api.md §12, issue 12 gap 7): what a crash left half-written is
// removed before the server listens, on both engines; an unusable STORAGE_URL stops the start
// with one line naming it, never echoing the secret.

let s3: S3Server
beforeAll(async () => {
  s3 = await startS3Server()
})
afterAll(() => s3.close())
const newDataDir = dataDirs('storage-start')

describe('leftovers of a crash are removed at start', () => {
  test('local: .part files and scratch files go, published files stay', async () => {
    const s = await startTestServer()
    const kept = newId('file-')
    await writeBlob(s.deps, kept, '{"a":1}\n')
    await s.stop()
    // What a crash mid-upload leaves: a `.part` beside the files, a spooled result upload.
    const dir = newDataDir()
    const files = join(dir, 'files')
    mkdirSync(join(files, 'tmp'), { recursive: true })
    writeFileSync(join(files, kept), '{"a":1}\n')
    writeFileSync(join(files, `${newId('file-')}.part`), '{"half":')
    writeFileSync(join(files, 'tmp', 'spooled'), '{"custom_id":')
    const again = await startTestServer({ DATA_DIR: dir })
    try {
      expect(readdirSync(files).sort()).toEqual([kept, 'tmp'])
      expect(readdirSync(join(files, 'tmp'))).toEqual([])
    } finally {
      await again.stop()
    }
  })

  test('S3: scratch objects go, published files stay', async () => {
    const env = s3.env()
    const first = await startTestServer(env)
    const kept = newId('file-')
    await writeBlob(first.deps, kept, '{"a":1}\n')
    const scratch = [scratchKey(), scratchKey()]
    for (const key of scratch) await writeBlob(first.deps, key, '{"custom_id":')
    await first.stop()
    const again = await startTestServer(env)
    try {
      expect(await Array.fromAsync(again.deps.blobs.list('tmp/'))).toEqual([])
      expect(await blobExists(again.deps, kept)).toBe(true)
    } finally {
      await again.stop()
    }
  })
})

describe('an unusable STORAGE_URL stops the start with one line', () => {
  const secret = 'Secret-Access-Key-Value-42'
  // A set JWT_SECRET: no "generated JWT secret" line before the one this is about.
  const jwt = { JWT_SECRET: 'storage-start-jwt-secret-0123456789abcdef' }
  const cases: [string, Record<string, string>, RegExp][] = [
    [
      'malformed',
      { STORAGE_URL: `s3://${secret}@Bucket` },
      /^gridkeep: invalid configuration: STORAGE_URL: /,
    ],
    [
      'unreachable',
      { STORAGE_URL: 's3://gridkeep-test', S3_ENDPOINT: 'http://127.0.0.1:9', S3_SECRET_ACCESS_KEY: secret },
      /^gridkeep: STORAGE_URL: the bucket cannot be used \(/,
    ],
  ]
  for (const [name, extra, line] of cases) {
    test(name, async () => {
      const server = await spawnServer(
        baseEnv(newDataDir(), { ...jwt, S3_ACCESS_KEY_ID: 'S3RVER', ...extra }),
      )
      expect(await server.exited).toBe(2)
      const out = server.output().trim()
      expect(out).toMatch(line)
      expect(out.split('\n')).toHaveLength(1)
      expect(out).not.toContain(secret)
    })
  }

  test('a bucket that does not exist', async () => {
    const env = { ...jwt, ...s3.env(), STORAGE_URL: 's3://no-such-bucket' }
    const server = await spawnServer(baseEnv(newDataDir(), env))
    expect(await server.exited).toBe(2)
    expect(server.output().trim()).toMatch(/^gridkeep: STORAGE_URL: the bucket cannot be used \(\w+\)$/)
  })
})
