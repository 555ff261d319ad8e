import { afterAll, describe, expect, test } from 'bun:test'
import { mkdirSync, readdirSync, readFileSync, readlinkSync } from 'node:fs'
import { join } from 'node:path'
import { makeTestApp } from '../helpers/app'
import { jsonl, uploadForm } from '../helpers/batches'
import { readBlob, storedEverything } from '../helpers/blobs'
import { makeUser } from '../helpers/builders'
import {
  batchRow,
  makeCatalogEntry,
  makeFleet,
  makeValidatedBatch,
  poll,
  registerWorker,
  uploadForm as resultsForm,
} from '../helpers/workers'

// docs/api.md §15 on a real small filesystem: DATA_DIR/files is a 1 MiB tmpfs that fills up during a
// write (ENOSPC). The upload answers 507, its partial bytes are removed, what was stored before is
// intact, and the same upload succeeds once the filesystem has room again. Mounting needs root;
// where the machine does not allow it, the runner skips the suite with that reason, and
// test/files/quota-disk.test.ts covers the rules through the injected probe.

const MiB = 1024 * 1024
const t = makeTestApp({ MAX_UPLOAD_BYTES: String(4 * MiB), MIN_FREE_DISK_BYTES: '0' })
const filesDir = join(t.config.DATA_DIR, 'files')
mkdirSync(filesDir, { recursive: true })
const sh = (...argv: string[]) => Bun.spawnSync(argv, { stderr: 'pipe' })
const mount =
  t.deps.blobs.engine === 'local'
    ? sh('mount', '-t', 'tmpfs', '-o', 'size=1m,mode=0700', 'tmpfs', filesDir)
    : null
const mounted = mount?.exitCode === 0
afterAll(() => {
  const umount = mounted ? sh('umount', filesDir) : null
  if (umount && umount.exitCode !== 0) {
    const holders = holdersOf(filesDir)
    // Detached lazily, so that DATA_DIR goes and no mount outlives the run; the run still fails.
    sh('umount', '-l', filesDir)
    t.close()
    throw new Error(
      `umount ${filesDir} failed (${umount.stderr.toString().trim()}); what holds it: ${holders.join('; ') || 'nothing found in /proc'}`,
    )
  }
  t.close()
})

/** Every process's open file or working directory under `dir` (/proc), as `pid <n> (<name>): <path>`. */
function holdersOf(dir: string): string[] {
  const found: string[] = []
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let links: string[] = []
    try {
      links = ['cwd', ...readdirSync(`/proc/${pid}/fd`).map((fd) => `fd/${fd}`)]
    } catch {}
    for (const l of links) {
      try {
        const target = readlinkSync(`/proc/${pid}/${l}`)
        if (target === dir || target.startsWith(`${dir}/`)) {
          const name = readFileSync(`/proc/${pid}/comm`, 'utf8').trim()
          found.push(
            `pid ${pid} (${name}${pid === String(process.pid) ? ', this test' : ''}) ${l}: ${target}`,
          )
        }
      } catch {}
    }
  }
  return found
}

/** A streamed body (no Content-Length, as the openai SDK sends streams): the size is not known up front. */
async function streamed(form: FormData) {
  const r = new Request('http://localhost/', { method: 'POST', body: form })
  const type = r.headers.get('content-type')!
  const bytes = new Uint8Array(await r.arrayBuffer())
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      for (let at = 0; at < bytes.length; at += 64 * 1024) c.enqueue(bytes.slice(at, at + 64 * 1024))
      c.close()
    },
  })
  return { raw: body, headers: { 'content-type': type } }
}

const grow = () => expect(sh('mount', '-o', 'remount,size=8m', filesDir).exitCode).toBe(0)
const shrink = () => expect(sh('mount', '-o', 'remount,size=1m', filesDir).exitCode).toBe(0)

// Where the filesystem cannot be mounted, the runner skips the suite and its name says why.
const why = mounted
  ? ''
  : t.deps.blobs.engine !== 'local'
    ? ' (skipped: the blob store is not local disk)'
    : ` (skipped: mount -t tmpfs failed: ${mount?.stderr.toString().trim() || 'not allowed'})`

describe.skipIf(!mounted)(`a real 1 MiB filesystem under DATA_DIR/files${why}`, () => {
  const big = jsonl(
    Array.from({ length: 2 * 1024 }, (_, i) => `{"custom_id":"${i}","pad":"${'x'.repeat(1000)}"}`),
  )

  test('the free-space probe reads it', async () => {
    const free = await t.deps.disk.freeBytes()
    expect(free).toBeGreaterThan(0)
    expect(free!).toBeLessThanOrEqual(MiB)
  })

  test('POST /v1/files: ENOSPC mid-write → 507, nothing partial, stored files intact; room again → 200', async () => {
    const u = await makeUser(t)
    const small = await t.req('POST', '/v1/files', {
      token: u.token,
      raw: uploadForm('{"custom_id":"a"}\n'),
    })
    expect(small.status).toBe(200)

    const full = await t.req('POST', '/v1/files', { token: u.token, ...(await streamed(uploadForm(big))) })
    expect(full.status).toBe(507)
    expect(full.body.error).toMatchObject({ type: 'server_error', code: 'insufficient_storage' })
    expect(await storedEverything(t.deps)).toEqual([small.body.id])
    expect(await readBlob(t.deps, small.body.id)).toBe('{"custom_id":"a"}\n')
    expect((await t.req('GET', '/v1/files', { token: u.token })).body.data).toHaveLength(1)

    grow()
    try {
      const ok = await t.req('POST', '/v1/files', { token: u.token, ...(await streamed(uploadForm(big))) })
      expect(ok.status).toBe(200)
      expect(ok.body.bytes).toBe(Buffer.byteLength(big))
      expect(await readBlob(t.deps, ok.body.id)).toBe(big)
      // Back to 1 MiB for the next test: the big file goes.
      expect((await t.req('DELETE', `/v1/files/${ok.body.id}`, { token: u.token })).status).toBe(200)
    } finally {
      shrink()
    }
  })

  test('upload-results: ENOSPC mid-write → 507, the batch stays held; room again → completed', async () => {
    const f = await makeFleet(t)
    const entry = await makeCatalogEntry(t.deps, { runtime_model_id: 'full:8b' })
    const ids = Array.from({ length: 1500 }, (_, i) => `req-${i + 1}`)
    const batch = await makeValidatedBatch(t.deps, { userId: f.user.id, model: entry.id, customIds: ids })
    const wid = await registerWorker(t, f.key, { models: ['full:8b'] })
    const job = (await poll(t, f.key, wid))!
    const fields = { job_id: job.job_id, worker_id: wid, assignment_id: job.assignment_id }
    // Answers of about 800 bytes each: the output is over 1 MiB.
    const answer = (id: string) =>
      JSON.stringify({
        id: `batch_req_${id}`,
        custom_id: id,
        response: {
          status_code: 200,
          request_id: id,
          body: { choices: [{ message: { content: 'x'.repeat(800) } }] },
        },
        error: null,
      })
    const output = jsonl(ids.map(answer))
    expect(Buffer.byteLength(output)).toBeGreaterThan(MiB)
    const before = await storedEverything(t.deps)

    const send = async () =>
      t.req('POST', '/workers/upload-results', {
        token: f.key,
        ...(await streamed(resultsForm(fields, output))),
      })
    const full = await send()
    expect(full.status).toBe(507)
    expect(full.body.error.code).toBe('insufficient_storage')
    expect(await storedEverything(t.deps)).toEqual(before)
    expect(await batchRow(t.deps, batch.id)).toMatchObject({ status: 'in_progress', attempts: 0 })

    grow()
    const ok = await send()
    expect(ok.status).toBe(200)
    expect(ok.body).toMatchObject({ status: 'completed', request_counts: { completed: 1500, failed: 0 } })
    expect(await readBlob(t.deps, ok.body.output_file_id)).toBe(output)
  })
})
