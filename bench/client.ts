// The terminal client's upload (docs/guide.md "The terminal client"): `gridkeep submit` of the 200 MB,
// 50,000-line benchmark file (bench/lib/input.ts, the file of bench/validation.ts) against a plain
// `curl -F` of the same file to the same server, side by side in one run. Prints figures, not a
// verdict.
//
//   bun run bench/client.ts              200 MB, 21 rounds
//   bun run bench/client.ts --quick      20 MB, 5 rounds
//
// The server runs in this process, on a temporary database; the compiled binary
// (test/helpers/binary.ts: GRIDKEEP_BINARY, else built once) and /usr/bin/curl are subprocesses,
// taking turns, each upload alone on the machine. curl's time is its own `%{time_total}`; the
// client's is the upload it reports (its `uploaded` JSON line: from before the file is opened to
// the server's answer); neither counts process start. `gridkeep submit` then waits for the batch
// to validate, so no validation runs under the next upload. Also: the client's peak RSS (GNU time)
// beside the file's size (the file is streamed, never held whole).
// Target: gridkeep ≥ 90 % of curl's throughput (the ratio of the medians; each round's own ratio,
// the two uploads side by side in time, is printed too; who goes first alternates).

import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SYSTEM_AUDIT } from '../src/domain/audit'
import { generateRawKey, keyDisplayPrefix, sha256Hex } from '../src/lib/keys'
import { setLogSink } from '../src/lib/logger'
import { gridkeepBinary, removeBuiltBinary } from '../test/helpers/binary'
import { addEntry, benchServer } from './lib/fixture'
import { chatInputFile } from './lib/input'
import { fmt, quick } from './lib/load'

const LINES = quick ? 5_000 : 50_000
const BYTES = quick ? 20_000_000 : 200_000_000
const ROUNDS = quick ? 5 : 21
const MODEL = 'bench-8b-q4km'
const CURL = '/usr/bin/curl'
const MB = 1_000_000

const path = await chatInputFile(LINES, BYTES, MODEL)
const size = statSync(path).size
const binary = await gridkeepBinary()
const gk = await benchServer({ LOG_LEVEL: 'info' })
// The server's own measure of each upload: its request line for POST /v1/files (arrival to answer).
const served: number[] = []
setLogSink((line) => {
  if (!line.includes('"route":"/v1/files"') || !line.includes('"method":"POST"')) return
  served.push(JSON.parse(line).duration_ms / 1000)
})
addEntry(gk.deps, MODEL, 'bench:latest', { vram_gb: null })
const key = generateRawKey()
await gk.deps.store.keys.createKey(
  { type: 'personal', userId: gk.userId },
  {
    name: 'bench',
    prefix: keyDisplayPrefix(key),
    key_hash: sha256Hex(key),
    created_by: gk.userId,
    created_at: gk.deps.clock.now(),
    expires_at: null,
  },
  SYSTEM_AUDIT,
)
const home = mkdtempSync(join(tmpdir(), 'gridkeep-bench-client-'))

async function curl(): Promise<number> {
  const proc = Bun.spawn(
    [
      CURL,
      '-sS',
      '-o',
      '/dev/null',
      '-w',
      '%{http_code} %{time_total}',
      '-H',
      `authorization: Bearer ${key}`,
      '-F',
      'purpose=batch',
      '-F',
      `file=@${path}`,
      `${gk.url}/v1/files`,
    ],
    { stdout: 'pipe', stderr: 'pipe' },
  )
  const [out, err] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()])
  const [status, seconds] = out.trim().split(' ')
  if ((await proc.exited) !== 0 || status !== '200') throw new Error(`curl: ${status} ${err}`)
  return Number(seconds)
}

async function client(): Promise<{ seconds: number; rssMiB: number }> {
  // Its JSON lines (one per percent uploaded) go to a file, read afterwards: a pipe read by this
  // process would wake the server's event loop during the upload, which curl's output never does.
  // GNU time reports the peak RSS when the client ends, so nothing samples it meanwhile either.
  const outPath = join(home, 'submit.out')
  const errPath = join(home, 'submit.err')
  // Bun writes a child's output over an existing file without truncating it.
  for (const p of [outPath, errPath]) writeFileSync(p, '')
  const proc = Bun.spawn(['/usr/bin/time', '-f', 'peak-rss-kb %M', binary, 'submit', path, '--json'], {
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: home,
      GRIDKEEP_SERVER: gk.url,
      GRIDKEEP_API_KEY: key,
    },
    stdout: Bun.file(outPath),
    stderr: Bun.file(errPath),
  })
  const code = await proc.exited
  const [out, err] = [readFileSync(outPath, 'utf8'), readFileSync(errPath, 'utf8')]
  const rssMiB = Number(/peak-rss-kb (\d+)/.exec(err)?.[1] ?? 0) / 1024
  const lines = out
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l))
  const uploaded = lines.find((l) => l.event === 'uploaded')
  const validated = lines.some((l) => l.event === 'batch' && l.status === 'validated')
  if (code !== 0 || !uploaded || uploaded.bytes !== size || !validated)
    throw new Error(`gridkeep submit: exit ${code}\n${out}${err}`)
  return { seconds: uploaded.seconds, rssMiB }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const times = { curl: [] as number[], client: [] as number[] }
const server = { curl: [] as number[], client: [] as number[] }
/** Each round's client throughput over curl's, side by side in time: a drift in load cancels out. */
const ratios: number[] = []
let rss = 0
try {
  // A first pair warms the page cache, the server and both programs; it is not counted.
  await curl()
  await client()
  for (let round = 0; round < ROUNDS; round++) {
    // Alternating who goes first cancels a drift (a warming disk, a neighbour's load).
    for (const who of round % 2 ? (['client', 'curl'] as const) : (['curl', 'client'] as const)) {
      // The previous upload's garbage (200 MB of chunks, a validation) is collected now, not
      // during this upload: each starts on a server at rest.
      Bun.gc(true)
      if (who === 'curl') times.curl.push(await curl())
      else {
        const r = await client()
        times.client.push(r.seconds)
        rss = Math.max(rss, r.rssMiB)
      }
      server[who].push(served.at(-1)!)
    }
    ratios.push(times.curl.at(-1)! / times.client.at(-1)!)
  }
} finally {
  await gk.stop()
  rmSync(home, { recursive: true, force: true })
  removeBuiltBinary()
}

const rate = (seconds: number) => size / MB / seconds
const curlRate = rate(median(times.curl))
const clientRate = rate(median(times.client))
console.log(`client upload: ${fmt(size / MB, 1)} MB, ${LINES} lines, median of ${ROUNDS} rounds`)
console.log(
  `   curl -F:          ${fmt(curlRate)} MB/s (${fmt(median(times.curl) * 1000)} ms; rounds ${times.curl.map((t) => fmt(rate(t))).join(', ')} MB/s)`,
)
console.log(
  `   gridkeep submit:  ${fmt(clientRate)} MB/s (${fmt(median(times.client) * 1000)} ms; rounds ${times.client.map((t) => fmt(rate(t))).join(', ')} MB/s)`,
)
console.log(
  `   ratio gridkeep / curl: ${fmt((100 * clientRate) / curlRate, 1)} %  (target ≥ 90 %); median of each round's ratio ${fmt(100 * median(ratios), 1)} % (${ratios.map((r) => fmt(100 * r)).join(', ')} %)`,
)
console.log(`   gridkeep peak RSS: ${fmt(rss)} MiB for a ${fmt(size / 2 ** 20)} MiB file (streamed)`)
console.log(
  `   as the server timed them (request arrival to answer): curl ${fmt(rate(median(server.curl)))} MB/s, gridkeep ${fmt(rate(median(server.client)))} MB/s, ratio ${fmt((100 * median(server.curl)) / median(server.client), 1)} %`,
)
