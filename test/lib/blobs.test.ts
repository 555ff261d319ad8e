import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type BlobStore, BlobStoreUnavailableError, createBlobStore, scratchKey } from '../../src/lib/blobs'
import { LocalBlobStore } from '../../src/lib/blobs/local'
import { StreamedReads } from '../../src/lib/blobs/random-reads'
import { parseStorageUrl } from '../../src/lib/blobs/s3'
import { readSpans, windowsOf } from '../../src/lib/blobs/spans'
import { newId } from '../../src/lib/ids'
import { testConfig } from '../helpers/app'
import { type S3Server, startS3Server } from '../helpers/s3'

// One suite, both engines (docs/api.md §12): what gridkeep does with file bytes behaves the same on
// local disk and on S3 (s3rver on loopback).

let s3: S3Server
const dirs: string[] = []
beforeAll(async () => {
  s3 = await startS3Server()
})
afterAll(async () => {
  await s3.close()
  for (const d of dirs) rmSync(d, { recursive: true, force: true })
})

const engines: [string, () => BlobStore][] = [
  [
    'local',
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'gridkeep-blobs-'))
      dirs.push(dir)
      return new LocalBlobStore(dir)
    },
  ],
  ['s3', () => createBlobStore(testConfig(s3.env()))],
]

const text = async (s: ReadableStream<Uint8Array> | null) => (s ? await new Response(s).text() : null)
const keys = async (store: BlobStore, prefix = '') => (await Array.fromAsync(store.list(prefix))).sort()
const MiB = 1024 * 1024

describe.each(engines)('blob store: %s', (_engine, make) => {
  test('a blob is readable only once published, with its size', async () => {
    const store = make()
    await store.prepare()
    const key = newId('file-')
    const w = store.create(key)
    await w.write(new TextEncoder().encode('{"a":1}\n'))
    await w.write(new TextEncoder().encode('{"b":2}\n'))
    expect(await store.size(key)).toBeNull()
    expect(await store.read(key)).toBeNull()
    expect(await keys(store)).toEqual([])
    expect(await w.publish()).toBe(16)
    expect(await store.size(key)).toBe(16)
    expect(await text(await store.read(key))).toBe('{"a":1}\n{"b":2}\n')
    expect(await new Response(await store.body(key)).text()).toBe('{"a":1}\n{"b":2}\n')
    expect(await keys(store)).toEqual([key])
  })

  test('a blob larger than one multipart part round-trips byte for byte', async () => {
    const store = make()
    const key = newId('file-')
    const w = store.create(key)
    const chunk = new Uint8Array(MiB)
    for (let i = 0; i < 20; i++) await w.write(chunk.fill(i))
    expect(await w.publish()).toBe(20 * MiB)
    const got = new Uint8Array(await new Response(await store.read(key)).arrayBuffer())
    expect(got.length).toBe(20 * MiB)
    for (let i = 0; i < 20; i++) expect(got[i * MiB + 12345]).toBe(i)
  })

  test('an aborted blob leaves nothing, large or small, before or after publishing', async () => {
    const store = make()
    const big = store.create(newId('file-'))
    for (let i = 0; i < 12; i++) await big.write(new Uint8Array(MiB))
    await big.abort()
    const small = store.create(newId('file-'))
    await small.write(new Uint8Array(10))
    await small.abort()
    const key = newId('file-')
    const done = store.create(key)
    await done.write(new Uint8Array(10))
    await done.publish()
    expect(await keys(store)).toEqual([key])
    await done.abort()
    expect(await keys(store)).toEqual([])
    expect(await store.size(key)).toBeNull()
  })

  test('remove deletes a blob; removing a missing one is no error', async () => {
    const store = make()
    const key = newId('file-')
    const w = store.create(key)
    await w.write(new Uint8Array(3))
    await w.publish()
    await store.remove(key)
    await store.remove(key)
    expect(await store.size(key)).toBeNull()
  })

  test('keys that are not file ids or scratch names never reach a path or an object name', () => {
    const store = make()
    for (const bad of ['../etc/passwd', 'file-a/../../x', '', 'tmp/../x', '/abs', 'a b'])
      expect(() => store.create(bad)).toThrow('not a blob key')
  })

  test('spans of lines are read in their order, each with its terminator; the file order is one range (docs/api.md §16)', async () => {
    const store = make()
    await store.prepare()
    const key = newId('file-')
    // 3,000 lines of ~200 bytes: far apart and near, in windows of several spans and of one.
    const lines = Array.from({ length: 3000 }, (_, i) =>
      JSON.stringify({ custom_id: `r${i}`, pad: 'x'.repeat(180) }),
    )
    const w = store.create(key)
    await w.write(new TextEncoder().encode(lines.join('\n')))
    await w.publish()
    const starts: number[] = []
    let at = 0
    for (const l of lines) {
      starts.push(at)
      at += l.length + 1
    }
    const span = (i: number) => ({ start: starts[i]!, end: starts[i]! + lines[i]!.length })
    // Every 7th line backwards, then runs of neighbours: an execution order of its own.
    const order = [
      ...Array.from({ length: 400 }, (_, k) => 2999 - 7 * k),
      ...Array.from({ length: 50 }, (_, k) => 10 + k),
    ]
    expect(await text(await readSpans(store, key, { ranges: order.map(span), lines: true }))).toBe(
      order.map((i) => `${lines[i]}\n`).join(''),
    )
    // A span up to the next line holds its terminator: it is sent as is.
    const withLf = (i: number) => ({ start: starts[i]!, end: starts[i]! + lines[i]!.length + 1 })
    expect(await text(await readSpans(store, key, { ranges: [withLf(7), withLf(3)], lines: true }))).toBe(
      `${lines[7]}\n${lines[3]}\n`,
    )
    // The file order: one byte range, as it is in the file (the last line to the end).
    expect(
      await text(
        await readSpans(store, key, { ranges: [{ start: starts[2998]!, end: null }], lines: false }),
      ),
    ).toBe(`${lines[2998]}\n${lines[2999]}`)
    expect(await readSpans(store, newId('file-'), { ranges: [span(0)], lines: true })).toBeNull()
  })

  test('listing a prefix past 1,000 blobs returns each exactly once; prepare() removes every scratch blob', async () => {
    const store = make()
    await store.prepare()
    const scratch = Array.from({ length: 1_100 }, () => scratchKey())
    for (let i = 0; i < scratch.length; i += 50) {
      await Promise.all(
        scratch.slice(i, i + 50).map(async (k) => {
          const w = store.create(k)
          await w.write(new Uint8Array([i % 256]))
          await w.publish()
        }),
      )
    }
    const kept = newId('file-')
    const w = store.create(kept)
    await w.write(new Uint8Array(1))
    await w.publish()
    const listed = await keys(store, 'tmp/')
    expect(listed.length).toBe(1_100)
    expect(listed).toEqual([...scratch].sort())
    expect(await store.prepare()).toBe(1_100)
    expect(await keys(store, 'tmp/')).toEqual([])
    expect(await keys(store)).toEqual([kept])
  }, 120_000)
})

describe('local engine', () => {
  test('prepare() removes .part files a crash left mid-upload, and nothing else', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gridkeep-blobs-'))
    dirs.push(dir)
    const store = new LocalBlobStore(dir)
    const kept = newId('file-')
    writeFileSync(join(dir, kept), 'x')
    writeFileSync(join(dir, `${newId('file-')}.part`), 'half')
    expect(await store.prepare()).toBe(1)
    expect(readdirSync(dir).sort()).toEqual([kept, 'tmp'])
  })

  test('no descriptor outlives what used it: a publish, a read to its end, a range, a cancelled read', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gridkeep-blobs-'))
    dirs.push(dir)
    const store = new LocalBlobStore(dir)
    // This process's open files under `dir` (Linux /proc): none may be left when the call resolves
    // (a descriptor closed in the background keeps a filesystem busy: it cannot be unmounted).
    const open = () =>
      readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return readlinkSync(`/proc/self/fd/${fd}`).startsWith(dir)
        } catch {
          return false
        }
      })
    const bytes = new Uint8Array(300_000).fill(7)
    // The background close is a race: many turns of each, so that one left open shows.
    for (let i = 0; i < 100; i++) {
      const key = newId('file-')
      const w = store.create(key)
      await w.write(bytes)
      expect(await w.publish()).toBe(bytes.length)
      expect(open()).toEqual([])
      expect((await new Response(await store.read(key)).arrayBuffer()).byteLength).toBe(bytes.length)
      expect(open()).toEqual([])
      expect(await text(await store.readRange(key, 299_990, null))).toBe('\x07'.repeat(10))
      expect(open()).toEqual([])
      expect((await new Response(await store.readRange(key, 5, 262_200)).arrayBuffer()).byteLength).toBe(
        262_195,
      )
      expect(open()).toEqual([])
      const reader = (await store.read(key))!.getReader()
      await reader.read()
      await reader.cancel()
      expect(open()).toEqual([])
    }
  })
})

describe('S3 engine settings', () => {
  test('STORAGE_URL parses to a bucket and a key prefix', () => {
    expect(parseStorageUrl('s3://bucket')).toEqual({ bucket: 'bucket', prefix: '' })
    expect(parseStorageUrl('s3://my.bucket/a/b/')).toEqual({ bucket: 'my.bucket', prefix: 'a/b/' })
    for (const bad of ['s3://', 'http://bucket', 's3://B', 's3://bucket/../x', 's3://a:b@bucket'])
      expect(parseStorageUrl(bad)).toBeNull()
  })

  test('an unreachable endpoint stops prepare() with one line naming STORAGE_URL, never the secret', async () => {
    const secret = 'very-secret-key-value-123'
    const store = createBlobStore(
      testConfig({ ...s3.env(), S3_ENDPOINT: 'http://127.0.0.1:9', S3_SECRET_ACCESS_KEY: secret }),
    )
    const error = await store.prepare().catch((e) => e)
    expect(error).toBeInstanceOf(BlobStoreUnavailableError)
    expect(error.message).toStartWith('STORAGE_URL: ')
    expect(error.message).not.toContain('\n')
    expect(error.message).not.toContain(secret)
  })

  test('wrong credentials stop prepare() the same way', async () => {
    const store = createBlobStore(testConfig({ ...s3.env(), S3_ACCESS_KEY_ID: 'NOT-AN-ACCOUNT' }))
    const error = await store.prepare().catch((e) => e)
    expect(error).toBeInstanceOf(BlobStoreUnavailableError)
    expect(error.message).toStartWith('STORAGE_URL: ')
    expect(error.message).not.toContain('S3RVER')
  })
})

describe('random reads of a streamed blob', () => {
  test('a remote blob is re-read from the copy of what was streamed so far, across chunks', () => {
    const reads = new StreamedReads(null)
    try {
      reads.append(Buffer.from('{"custom_id":"a"}\n{"cust'))
      reads.append(Buffer.from('om_id":"b"}\n'))
      expect(Buffer.from(reads.read(18, 17)!).toString()).toBe('{"custom_id":"b"}')
      expect(Buffer.from(reads.read(0, 17)!).toString()).toBe('{"custom_id":"a"}')
      expect(reads.read(30, 17)).toBeNull()
    } finally {
      reads.close()
    }
  })

  test('a local blob is read in place', () => {
    const dir = mkdtempSync(join(tmpdir(), 'gridkeep-blobs-'))
    dirs.push(dir)
    writeFileSync(join(dir, 'in'), 'abcdef')
    const reads = new StreamedReads(join(dir, 'in'))
    try {
      expect(Buffer.from(reads.read(2, 3)!).toString()).toBe('cde')
    } finally {
      reads.close()
    }
  })
})

describe('windows of spans (src/lib/blobs/spans.ts)', () => {
  test('spans close after one another share a window; a span before, far after, or past the size starts a new one', () => {
    const r = (start: number, end: number) => ({ start, end })
    const w = windowsOf([
      r(0, 10),
      r(11, 20),
      r(30_000, 30_010),
      r(5, 8),
      r(400_000, 400_010),
      r(400_011, 2_500_000),
    ])
    expect(w.map((x) => [x.start, x.end, x.spans.length])).toEqual([
      [0, 30_010, 3],
      [5, 8, 1],
      [400_000, 400_010, 1],
      [400_011, 2_500_000, 1],
    ])
  })
})
