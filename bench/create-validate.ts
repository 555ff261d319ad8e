// Create → validated, through HTTP on a real server:
// (1) 2,000 small batches (one 3-line file each, uploaded beforehand) created at full speed
//     (concurrency 64); each timed from its create response to its validation's `done` event.
//     Targets: p50 ≤ 1 s; the last one validated within 2 s of the last create. The bare baseline
//     reads and JSON.parses the same 2,000 files in a loop, in this run: the drain's ratio to it.
// (2) A 200 MB file is validating while small batches are created one every 100 ms: the slowest
//     small batch's create → validated (target ≤ 1 s).
// SQLite by default; with DATABASE_URL (or --postgres: a throwaway cluster) on PostgreSQL.
//
//   bun run bench/create-validate.ts              (2,000 batches; 200 MB)
//   bun run bench/create-validate.ts --quick      (400 batches; 20 MB)
//   bun run bench/create-validate.ts --postgres

import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freshPostgresUrl } from '../test/helpers/postgres'
import { benchServer } from './lib/fixture'
import { fmt, percentile, quick } from './lib/load'

const BATCHES = quick ? 400 : 2_000
const CONCURRENCY = 64
const LARGE_BYTES = quick ? 20_000_000 : 200_000_000
const TRICKLE = 20

const postgres = process.argv.includes('--postgres') ? await freshPostgresUrl() : process.env.DATABASE_URL
const gk = await benchServer({ LOG_LEVEL: 'warn', ...(postgres ? { DATABASE_URL: postgres } : {}) })
const token = (await gk.deps.tokens.sign(gk.userId, 0)).token
const model = (await gk.deps.store.catalogue.enabledEntries()).find((e) => e.task_type === 'chat')!.id
const auth = { authorization: `Bearer ${token}` }

const line = (id: string, pad = '') =>
  JSON.stringify({
    custom_id: id,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model, messages: [{ role: 'user', content: `hello ${id}${pad}` }] },
  })

async function upload(content: Blob): Promise<string> {
  const form = new FormData()
  form.append('purpose', 'batch')
  form.append('file', content, 'input.jsonl')
  const res = await fetch(`${gk.url}/v1/files`, { method: 'POST', headers: auth, body: form })
  if (res.status !== 200) throw new Error(`upload: ${res.status} ${await res.text()}`)
  return ((await res.json()) as { id: string }).id
}

async function create(fileId: string): Promise<string> {
  const res = await fetch(`${gk.url}/v1/batches`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({
      input_file_id: fileId,
      endpoint: '/v1/chat/completions',
      completion_window: '24h',
    }),
  })
  if (res.status !== 200) throw new Error(`create: ${res.status} ${await res.text()}`)
  return ((await res.json()) as { id: string }).id
}

// When each batch's validation finished (this process validates what it creates).
const doneAt = new Map<string, number>()
const waiting = new Map<string, (() => void)[]>()
gk.deps.batchEvents.onPublish((batchId, e) => {
  if (e.event !== 'done') return
  doneAt.set(batchId, performance.now())
  for (const resolve of waiting.get(batchId) ?? []) resolve()
  waiting.delete(batchId)
})
const doneOf = (id: string) =>
  doneAt.has(id)
    ? Promise.resolve()
    : new Promise<void>((resolve) => waiting.set(id, [...(waiting.get(id) ?? []), resolve]))
const allDone = async (ids: string[]) => {
  await Promise.all(ids.map(doneOf))
}

async function pool<T>(n: number, count: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(count)
  let next = 0
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < count) {
        const i = next++
        out[i] = await task(i)
      }
    }),
  )
  return out
}

console.log(
  `${postgres ? 'PostgreSQL' : 'SQLite'}; ${fmt(BATCHES)} small batches at concurrency ${CONCURRENCY}`,
)
const contents = Array.from({ length: BATCHES }, (_, b) =>
  [0, 1, 2].map((i) => line(`b${b}-r${i}`)).join('\n'),
)
const files = await pool(16, BATCHES, (i) => upload(new Blob([contents[i]!])))

// (1) Full speed.
const createdAt = new Map<string, number>()
const t0 = performance.now()
const ids = await pool(CONCURRENCY, BATCHES, async (i) => {
  const id = await create(files[i]!)
  createdAt.set(id, performance.now())
  return id
})
const lastCreate = Math.max(...createdAt.values())
await allDone(ids)
const latencies = ids.map((id) => Math.max(0, doneAt.get(id)! - createdAt.get(id)!))
const lastDone = Math.max(...ids.map((id) => doneAt.get(id)!))
const drainS = (lastDone - t0) / 1000

// The bare baseline: the same files read back and every line JSON.parsed, one after the other.
const dir = mkdtempSync(join(tmpdir(), 'gridkeep-bench-bare-'))
for (let i = 0; i < BATCHES; i++) await Bun.write(join(dir, `${i}.jsonl`), contents[i]!)
const b0 = performance.now()
for (let i = 0; i < BATCHES; i++)
  for (const l of (await Bun.file(join(dir, `${i}.jsonl`)).text()).split('\n')) JSON.parse(l)
const bareS = (performance.now() - b0) / 1000
rmSync(dir, { recursive: true, force: true })

console.log(
  `created ${fmt(BATCHES)} in ${fmt((lastCreate - t0) / 1000, 2)} s; create → validated p50 ${fmt(percentile(latencies, 50))} ms, ` +
    `p99 ${fmt(percentile(latencies, 99))} ms, max ${fmt(Math.max(...latencies))} ms (target p50 ≤ 1,000 ms)`,
)
console.log(
  `last validated ${fmt(Math.max(0, lastDone - lastCreate))} ms after the last create (target ≤ 2,000 ms); ` +
    `all validated in ${fmt(drainS, 2)} s vs bare read + parse of the same files ${fmt(bareS, 2)} s ` +
    `(${fmt((bareS / drainS) * 100, 1)} %)`,
)

// (2) A large file validating while small batches keep coming.
const pad = 'x'.repeat(4000)
const largeLines = Math.ceil(LARGE_BYTES / (line('r0', pad).length + 1))
const largeDir = mkdtempSync(join(tmpdir(), 'gridkeep-bench-large-'))
const largePath = join(largeDir, 'large.jsonl')
const writer = Bun.file(largePath).writer()
for (let i = 0; i < largeLines; i++) writer.write(`${line(`r${i}`, pad)}\n`)
await writer.end()
const largeFile = await upload(Bun.file(largePath))
rmSync(largeDir, { recursive: true, force: true })
const smallFiles = await pool(4, TRICKLE, (i) => upload(new Blob([line(`t${i}`)])))
const l0 = performance.now()
const large = await create(largeFile)
const trickle: number[] = []
const smallIds: string[] = []
for (let i = 0; i < TRICKLE && !doneAt.has(large); i++) {
  const id = await create(smallFiles[i]!)
  const at = performance.now()
  smallIds.push(id)
  void allDone([id]).then(() => trickle.push(Math.max(0, doneAt.get(id)! - at)))
  await Bun.sleep(100)
}
await allDone([large, ...smallIds])
console.log(
  `${fmt(LARGE_BYTES / 1e6)} MB file (${fmt(largeLines)} lines) validated in ${fmt((doneAt.get(large)! - l0) / 1000, 2)} s; ` +
    `${smallIds.length} small batches created meanwhile: create → validated max ${fmt(Math.max(...trickle))} ms, ` +
    `p50 ${fmt(percentile(trickle, 50))} ms (target max ≤ 1,000 ms)`,
)

await gk.stop()
process.exit(0)
