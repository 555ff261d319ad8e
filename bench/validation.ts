// Validation throughput and server memory. Prints figures, not a pass/fail verdict.
//
//   bun run bench/validation.ts              200 MB, 50,000-line chat file
//   BENCH_QUICK=1 bun run bench/validation.ts   20 MB, 5,000 lines (smoke run)
//   bun run bench/validation.ts --order          section 4 alone
//   BENCH_ROUNDS_1M=5 bun run bench/validation.ts --keyed   the million-line runs 5 times each (default 3)
//
// 1. Throughput: the validator (validateBatch on a real database) against a bare Bun loop that
//    streams the same file, splits lines and JSON.parses each one — both in this run, best of N.
//    Target: validator ≥ 50% of the bare loop.
// 2. custom_id tracking: the compact hashed set against a Set of the id strings.
// 3. Memory: a real server in a subprocess; the file is uploaded (streamed, chunked) and
//    validated while /proc/<pid>/status VmRSS is sampled every 50 ms. Target: peak < 100 MB
//    above idle.
// 4. Execution order by shared prefix (docs/api.md §6, PREFIX_ORDER): the validator's time with it
//    and without (section 1's file); PrefixOrder alone over a million keyed prompts (~600
//    characters: sharing nothing, and documents × questions); and 1,000,000-line batches
//    (MAX_REQUESTS_PER_BATCH and MAX_UPLOAD_BYTES raised) on a real server with and without it —
//    ~200-byte lines (nothing keyed) and both keyed files: validation time and peak RSS above idle.
//    Targets: ≤ 1.3× the time, RSS within the figure without it.

import { Database } from 'bun:sqlite'
import { mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { createServer } from '../src/compose'
import { loadConfig } from '../src/config'
import { batches, catalogEntries, files, users } from '../src/db/schema'
import { MIN_ORDERED_CHARS, PrefixOrder, promptParts } from '../src/domain/prefix-order'
import { CompactIdSet } from '../src/lib/id-set'
import { newId } from '../src/lib/ids'
import { setLogLevel } from '../src/lib/logger'
import { readLines } from '../src/lib/read-lines'
import { validateBatch } from '../src/services/validator'
import { chatInputFile, keyedInputFile } from './lib/input'

const QUICK = process.env.BENCH_QUICK === '1'
const LINES = QUICK ? 5_000 : 50_000
const TARGET_BYTES = QUICK ? 20_000_000 : 200_000_000
const ROUNDS = 5
const MODEL = 'bench-8b-q4km'
const MiB = 1024 * 1024
const root = resolve(import.meta.dir, '..')

const fmt = (n: number, d = 0) => n.toFixed(d)

// ---------------------------------------------------------------------------------------------
// 1. Throughput

/** The baseline: stream, split on LF, decode, JSON.parse. Nothing else. */
async function bareLoop(path: string): Promise<number> {
  // The same decoder settings as the validator (Bun's fatal decoder is the faster one here).
  const decoder = new TextDecoder('utf-8', { fatal: true })
  let rest: Uint8Array | null = null
  let lines = 0
  for await (const chunk of Bun.file(path).stream()) {
    let start = 0
    if (rest) {
      // Only the line that spans two chunks is copied.
      const nl = chunk.indexOf(10)
      if (nl < 0) {
        const joined: Uint8Array = new Uint8Array(rest.length + chunk.length)
        joined.set(rest)
        joined.set(chunk, rest.length)
        rest = joined
        continue
      }
      const joined: Uint8Array = new Uint8Array(rest.length + nl)
      joined.set(rest)
      joined.set(chunk.subarray(0, nl), rest.length)
      JSON.parse(decoder.decode(joined))
      lines++
      rest = null
      start = nl + 1
    }
    for (;;) {
      const nl = chunk.indexOf(10, start)
      if (nl < 0) break
      JSON.parse(decoder.decode(chunk.subarray(start, nl)))
      lines++
      start = nl + 1
    }
    if (start < chunk.length) rest = chunk.slice(start)
  }
  return lines
}

/** validateBatch on a real database of its own, over the file at `path`; `close()` removes it. */
function validatorOn(path: string, env: Record<string, string> = {}) {
  const bytes = statSync(path).size
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-bench-'))
  const config = loadConfig({ DATA_DIR: dir, JWT_SECRET: 'x'.repeat(40), LOG_LEVEL: 'warn', ...env })
  // The in-process validator logs through the process-wide logger; keep the figures readable.
  setLogLevel(config.LOG_LEVEL)
  const deps = createServer(config)
  const now = deps.clock.now()
  deps.db
    .insert(users)
    .values({
      id: 'user_bench',
      email: 'b@bench',
      password_hash: 'x',
      full_name: 'B',
      created_at: now,
      updated_at: now,
    })
    .run()
  deps.db
    .insert(catalogEntries)
    .values({ id: MODEL, display_name: 'Bench', task_type: 'chat', created_at: now, updated_at: now })
    .run()
  const fileId = newId('file-')
  mkdirSync(join(dir, 'files'), { recursive: true })
  // The local engine's blob path (the default STORAGE_URL): the input is linked, not copied.
  symlinkSync(path, deps.blobs.localPath(fileId)!)
  deps.db
    .insert(files)
    .values({
      id: fileId,
      user_id: 'user_bench',
      filename: 'b.jsonl',
      purpose: 'batch',
      bytes,
      created_at: now,
    })
    .run()

  const validator = async () => {
    const id = newId('batch_')
    deps.db
      .insert(batches)
      .values({
        id,
        user_id: 'user_bench',
        input_file_id: fileId,
        endpoint: '/v1/chat/completions',
        completion_window: '24h',
        status: 'validating',
        created_at: now,
        updated_at: now,
      })
      .run()
    const outcome = await validateBatch(deps, id)
    if (outcome?.status !== 'validated' || outcome.request_lines !== LINES) {
      throw new Error(`unexpected outcome ${JSON.stringify(outcome)}`)
    }
  }
  return {
    validator,
    close() {
      deps.sqlite.close()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

async function throughput(path: string) {
  const bytes = statSync(path).size
  const { validator, close } = validatorOn(path)
  const bare = async () => {
    if ((await bareLoop(path)) !== LINES) throw new Error('bare loop miscounted')
  }

  const best = { bare: Number.POSITIVE_INFINITY, validator: Number.POSITIVE_INFINITY }
  await bare() // warm the page cache and the JIT
  await validator()
  for (let r = 0; r < ROUNDS; r++) {
    for (const [name, fn] of [
      ['bare', bare],
      ['validator', validator],
    ] as const) {
      const t0 = performance.now()
      await fn()
      best[name] = Math.min(best[name], performance.now() - t0)
    }
  }
  close()
  const mibs = (ms: number) => bytes / MiB / (ms / 1000)
  console.log(`\n1. throughput (${fmt(bytes / MiB, 1)} MiB, ${LINES} lines, best of ${ROUNDS})`)
  console.log(
    `   bare loop (stream + split + JSON.parse): ${fmt(mibs(best.bare))} MiB/s (${fmt(best.bare)} ms)`,
  )
  console.log(
    `   validator (validateBatch, all rules):    ${fmt(mibs(best.validator))} MiB/s (${fmt(best.validator)} ms)`,
  )
  console.log(`   ratio validator / bare: ${fmt((100 * best.bare) / best.validator)}%  (target ≥ 50%)`)
}

/**
 * The validator with prefix order and without, taking turns (the machine is shared): best of ROUNDS,
 * wall clock and this process's CPU time.
 */
async function orderCost(path: string) {
  const runs = [validatorOn(path, { PREFIX_ORDER: 'false' }), validatorOn(path, { PREFIX_ORDER: 'true' })]
  const wall = [Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY]
  const cpu = [Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY]
  for (const r of runs) await r.validator() // warm
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, r] of runs.entries()) {
      const c0 = process.cpuUsage()
      const t0 = performance.now()
      await r.validator()
      wall[i] = Math.min(wall[i]!, performance.now() - t0)
      const c = process.cpuUsage(c0)
      cpu[i] = Math.min(cpu[i]!, (c.user + c.system) / 1000)
    }
  }
  for (const r of runs) r.close()
  console.log(
    `   validator over section 1's file, best of ${ROUNDS} taking turns: ${fmt(wall[0]!)} ms without, ${fmt(wall[1]!)} ms with ` +
      `= ${fmt(wall[1]! / wall[0]!, 2)}×; CPU ${fmt(cpu[0]!)} vs ${fmt(cpu[1]!)} ms = ${fmt(cpu[1]! / cpu[0]!, 2)}× (target ≤ 1.3×)`,
  )
}

// ---------------------------------------------------------------------------------------------
// 2. custom_id tracking

function idTracking() {
  const n = LINES * 4
  // Ids as the validator sees them: fresh strings out of JSON.parse, held only by the structure.
  const idOf = (i: number) => JSON.parse(`"request-${i}"`) as string
  const measure = (label: string, make: () => { add(id: string, i: number): void; bytes?: () => number }) => {
    Bun.gc(true)
    const before = process.memoryUsage().heapUsed
    const t0 = performance.now()
    const s = make()
    for (let i = 0; i < n; i++) s.add(idOf(i), i)
    const ms = performance.now() - t0
    Bun.gc(true)
    const heap = process.memoryUsage().heapUsed - before
    const bytes = s.bytes ? s.bytes() : heap
    console.log(
      `   ${label}: ${fmt((ms * 1e6) / n)} ns/id (JSON.parse of the id included), ${fmt(bytes / n, 1)} bytes/id`,
    )
    return s
  }
  console.log(`\n2. custom_id tracking (${n} distinct ids)`)
  const sets = [
    measure('Set<string> ', () => {
      const set = new Set<string>()
      return { add: (id: string) => void set.add(id), set }
    }),
    measure('CompactIdSet', () => {
      const set = new CompactIdSet((offset) => idOf(offset))
      return {
        add: (id: string, i: number) => void set.addIfAbsent(id, i, id.length),
        bytes: () => set.bytes,
      }
    }),
  ]
  return sets.length
}

// ---------------------------------------------------------------------------------------------
// 3. Memory of a real server

/** CPU seconds a process has used (/proc/<pid>/stat utime + stime, ticks of 1/100 s). */
function cpuSeconds(pid: number): number {
  const stat = require('node:fs').readFileSync(`/proc/${pid}/stat`, 'utf8') as string
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(fields[11]) + Number(fields[12])) / 100
}

function rssMiB(pid: number): number {
  try {
    const status = require('node:fs').readFileSync(`/proc/${pid}/status`, 'utf8') as string
    const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0)
    return kb / 1024
  } catch {
    return 0
  }
}

async function serverMemory(
  path: string,
  o: { env?: Record<string, string>; label?: string; lines?: number } = {},
): Promise<{ validateMs: number; cpuMs: number; peakAboveIdle: number }> {
  const bytes = statSync(path).size
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-bench-server-'))
  const proc = Bun.spawn(['bun', 'run', 'src/index.ts'], {
    cwd: root,
    env: {
      ...process.env,
      DATA_DIR: dir,
      PORT: '0',
      HOST: '127.0.0.1',
      JWT_SECRET: 'bench-secret-bench-secret-bench-secret-00',
      ADMIN_PASSWORD: 'bench-admin-password',
      LOG_LEVEL: 'info',
      ...o.env,
    },
    stdout: 'pipe',
    stderr: 'inherit',
  })
  try {
    const url = await new Promise<string>((resolveUrl, reject) => {
      const decoder = new TextDecoder()
      let text = ''
      let found = false
      ;(async () => {
        // Keep draining stdout for the whole run so the server never blocks on a full pipe.
        for await (const chunk of proc.stdout) {
          if (found) continue
          text += decoder.decode(chunk)
          const m = /"msg":"gridkeep listening","url":"([^"]+)"/.exec(text)
          if (m) {
            found = true
            resolveUrl(m[1]!)
          }
        }
        if (!found) reject(new Error(`server did not start:\n${text}`))
      })()
    })
    const api = async (method: string, p: string, token?: string, body?: unknown) => {
      const res = await fetch(url + p, {
        method,
        headers: {
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(body ? { 'content-type': 'application/json' } : {}),
        },
        body: body ? JSON.stringify(body) : undefined,
      })
      if (!res.ok) throw new Error(`${method} ${p}: ${res.status} ${await res.text()}`)
      return res.json() as Promise<any>
    }
    await api('POST', '/v1/auth/signup', undefined, {
      email: 'bench@example.test',
      password: 'bench-password-1',
      full_name: 'Bench',
    })
    const { access_token: token } = await api('POST', '/v1/auth/login', undefined, {
      email: 'bench@example.test',
      password: 'bench-password-1',
    })
    // The catalogue entry goes straight into the server's database (WAL allows a second writer).
    const db = new Database(join(dir, 'gridkeep.db'))
    db.run(
      "INSERT OR IGNORE INTO catalog_entries (id, display_name, task_type, created_at, updated_at) VALUES (?, 'Bench', 'chat', 0, 0)",
      [MODEL],
    )
    db.close()

    await Bun.sleep(500)
    Bun.gc(true)
    let idle = Number.POSITIVE_INFINITY
    for (let i = 0; i < 5; i++) {
      idle = Math.min(idle, rssMiB(proc.pid))
      await Bun.sleep(50)
    }
    let peak = 0
    let phase: 'upload' | 'validation' = 'upload'
    const peaks = { upload: 0, validation: 0 }
    const sampler = setInterval(() => {
      const r = rssMiB(proc.pid)
      peak = Math.max(peak, r)
      peaks[phase] = Math.max(peaks[phase], r)
    }, 50)

    const boundary = 'bench-boundary'
    const enc = new TextEncoder()
    async function* body() {
      yield enc.encode(
        `--${boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n` +
          `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="bench.jsonl"\r\n` +
          'Content-Type: application/octet-stream\r\n\r\n',
      )
      for await (const chunk of Bun.file(path).stream()) yield chunk
      yield enc.encode(`\r\n--${boundary}--\r\n`)
    }
    const t0 = performance.now()
    const res = await fetch(`${url}/v1/files`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        'content-type': `multipart/form-data; boundary=${boundary}`,
      },
      body: body() as any,
      duplex: 'half',
    } as RequestInit)
    const file = (await res.json()) as any
    if (res.status !== 200) throw new Error(`upload: ${res.status} ${JSON.stringify(file)}`)
    const uploadMs = performance.now() - t0

    phase = 'validation'
    // The server keeps answering while it validates: /healthz latency, probed every 20 ms.
    const latencies: number[] = []
    let probing = true
    const probe = (async () => {
      while (probing) {
        const p0 = performance.now()
        await fetch(`${url}/healthz`)
        latencies.push(performance.now() - p0)
        await Bun.sleep(20)
      }
    })()
    const cpu1 = cpuSeconds(proc.pid)
    const t1 = performance.now()
    const batch = await api('POST', '/v1/batches', token, { input_file_id: file.id })
    const events = await fetch(`${url}/v1/batches/${batch.id}/events`, {
      headers: { authorization: `Bearer ${token}` },
    })
    const text = await events.text() // the server closes the stream after `done`
    const validateMs = performance.now() - t1
    const cpuMs = (cpuSeconds(proc.pid) - cpu1) * 1000
    probing = false
    await probe
    clearInterval(sampler)
    const done = /event: done\ndata: (.*)\n/.exec(text)?.[1]
    const progress = text.split('event: progress').length - 1

    if (!done?.includes('"status":"validated"')) throw new Error(`validation did not pass: ${done}`)
    if (o.label) {
      console.log(
        `   ${o.label}: validation ${fmt(validateMs)} ms (server CPU ${fmt(cpuMs)} ms); RSS idle ${fmt(idle)} MiB, ` +
          `peak above idle ${fmt(peak - idle)} MiB`,
      )
      return { validateMs, cpuMs, peakAboveIdle: peak - idle }
    }
    console.log(`\n3. real server (subprocess pid ${proc.pid}), ${fmt(bytes / MiB, 1)} MiB file`)
    console.log(
      `   upload (chunked, streamed): ${fmt(uploadMs)} ms, ${fmt(bytes / MiB / (uploadMs / 1000))} MiB/s`,
    )
    console.log(
      `   validation via POST /v1/batches + events: ${fmt(validateMs)} ms, ${progress} progress events`,
    )
    console.log(`   done: ${done}`)
    latencies.sort((a, b) => a - b)
    console.log(
      `   /healthz during validation: ${latencies.length} answered, median ${fmt(latencies[latencies.length >> 1] ?? 0, 1)} ms, ` +
        `max ${fmt(latencies.at(-1) ?? 0, 1)} ms`,
    )
    console.log(`   RSS idle ${fmt(idle)} MiB; peak ${fmt(peak)} MiB`)
    console.log(
      `   peak above idle: upload ${fmt(peaks.upload - idle)} MiB, validation ${fmt(peaks.validation - idle)} MiB, ` +
        `overall ${fmt(peak - idle)} MiB  (target < 100 MB)`,
    )
    return { validateMs, cpuMs, peakAboveIdle: peak - idle }
  } finally {
    proc.kill()
    await proc.exited
    rmSync(dir, { recursive: true, force: true })
  }
}

const path = await chatInputFile(LINES, TARGET_BYTES, MODEL)
console.log(
  `input: ${path} (${fmt(statSync(path).size / MiB, 1)} MiB, ${LINES} lines)${QUICK ? ' [quick]' : ''}`,
)
// `--order`: section 4 alone; `--keyed`: only its keyed workloads (PrefixOrder alone and the real
// server's million keyed lines).
const KEYED_ONLY = process.argv.includes('--keyed')
const ORDER_ONLY = KEYED_ONLY || process.argv.includes('--order')
if (!ORDER_ONLY) {
  await throughput(path)
  idTracking()
  await serverMemory(path)
}

// ---------------------------------------------------------------------------------------------
// 4. Execution order by shared prefix (docs/api.md §6)

console.log('\n4. execution order by shared prefix (PREFIX_ORDER)')
if (!KEYED_ONLY) await orderCost(path)
const MILLION = QUICK ? 100_000 : 1_000_000
// Taking turns, three times each (the machine is shared): the median of each figure.
const ROUNDS_1M = Number(process.env.BENCH_ROUNDS_1M ?? 3)
/** The peak RSS above idle of validating a million-line batch before prefix order (MiB). */
const PEAK_BEFORE_MIB = 224

/**
 * A batch of MILLION lines on a real server with prefix order and without, ROUNDS_1M runs each, which
 * goes first alternating; the upload cap is raised with the request cap (`maxBytes`).
 */
async function million(path: string, what: string, maxBytes: number) {
  console.log(
    `   ${MILLION.toLocaleString('en')} lines, ${what} (${fmt(statSync(path).size / MiB, 1)} MiB), on a real server:`,
  )
  const big = { MAX_REQUESTS_PER_BATCH: String(MILLION), MAX_UPLOAD_BYTES: String(maxBytes) }
  const runs: Record<'off' | 'on', { validateMs: number; cpuMs: number; peakAboveIdle: number }[]> = {
    off: [],
    on: [],
  }
  for (let round = 0; round < ROUNDS_1M; round++) {
    // A run's figures must not depend on the one before.
    for (const side of round % 2 ? (['on', 'off'] as const) : (['off', 'on'] as const)) {
      runs[side].push(
        await serverMemory(path, {
          env: { ...big, PREFIX_ORDER: String(side === 'on') },
          label: side === 'on' ? 'prefix order     ' : 'PREFIX_ORDER=false',
        }),
      )
    }
  }
  const median = (side: 'off' | 'on', key: 'validateMs' | 'cpuMs' | 'peakAboveIdle') =>
    runs[side].map((r) => r[key]).sort((a, b) => a - b)[ROUNDS_1M >> 1]!
  console.log(
    `   with / without (medians of ${ROUNDS_1M}): time ${fmt(median('on', 'validateMs'))} vs ${fmt(median('off', 'validateMs'))} ms = ` +
      `${fmt(median('on', 'validateMs') / median('off', 'validateMs'), 2)}×, server CPU ${fmt(median('on', 'cpuMs'))} vs ${fmt(median('off', 'cpuMs'))} ms = ` +
      `${fmt(median('on', 'cpuMs') / median('off', 'cpuMs'), 2)}× (target ≤ 1.3×); peak RSS above idle ` +
      `${fmt(median('on', 'peakAboveIdle'))} vs ${fmt(median('off', 'peakAboveIdle'))} MiB = ` +
      `${fmt(median('on', 'peakAboveIdle') / median('off', 'peakAboveIdle'), 2)}× (target: within the figure without it, ` +
      `and within the +${PEAK_BEFORE_MIB} MiB measured on a million lines before prefix order)`,
  )
  const time = median('on', 'cpuMs') / median('off', 'cpuMs')
  const rss = median('on', 'peakAboveIdle')
  console.log(
    `   goals: time ≤ 1.3× ${time <= 1.3 ? 'met' : 'NOT met'} (server CPU); peak RSS ≤ +${PEAK_BEFORE_MIB} MiB ${rss <= PEAK_BEFORE_MIB ? 'met' : 'NOT met'}`,
  )
}

// The footprint per line (docs/api.md §6 "Execution order": a fixed-size key a line, never the
// prompt). While lines stream in, PrefixOrder holds 4 + 1 + 8 × levels bytes a keyed line — 29 for
// these ~600-character prompts (levels 256, 512 and whole) — and nothing for a line of at most 256
// characters; finish() adds 6 bytes a keyed line (parent, depth, reach) and two bit arrays of 16
// bits a keyed line (rounded up to a power of two), then the walk's 8 bytes a line: measured 41
// bytes a line at the most over these million lines (39.1 MiB). The order stored with the batch is
// 12 bytes a line (docs/api.md §16 "The request-line index": a line's start, float64, and length,
// uint32).

/**
 * PrefixOrder alone over a file's prompts: the time its add() calls take (each line parsed outside
 * the timed part, none kept: a heap holding a million prompts would time the garbage collector) and
 * its finish(), and the most bytes its arrays held (PrefixOrder.peakBytes).
 */
async function orderAlone(path: string, what: string) {
  const order = new PrefixOrder()
  let addMs = 0
  let lines = 0
  for await (const [, line] of readLines(Bun.file(path).stream(), MiB)) {
    const parts = promptParts('/v1/chat/completions', JSON.parse(line).body, MIN_ORDERED_CHARS)
    const t0 = performance.now()
    order.add(parts)
    addMs += performance.now() - t0
    lines++
  }
  const t1 = performance.now()
  const positions = order.finish()
  const finishMs = performance.now() - t1
  console.log(
    `   PrefixOrder alone, ${what}: add ${fmt(addMs)} ms, finish ${fmt(finishMs)} ms; its arrays ${fmt(order.peakBytes / MiB, 1)} MiB at most ` +
      `(${fmt(order.peakBytes / lines, 1)} bytes a line); ${positions ? 'an order of its own' : 'the file order'}`,
  )
}

// The bench's chat file scaled to a million lines: ~200-byte lines, prompts under the 256 characters
// that are keyed (docs/api.md §6), so nothing is keyed — a million short lines pay nothing.
if (!KEYED_ONLY) {
  const short = await chatInputFile(MILLION, MILLION * 200, MODEL)
  await million(short, 'short prompts, none keyed', 256 * MiB)
}
// Keyed prompts of ~600 characters: none sharing anything, and documents × questions.
for (const shape of ['distinct', 'shared'] as const) {
  const keyed = await keyedInputFile(MILLION, shape, MODEL)
  await orderAlone(keyed, shape === 'distinct' ? 'distinct prompts' : 'documents × questions')
}
for (const shape of ['distinct', 'shared'] as const) {
  const keyed = await keyedInputFile(MILLION, shape, MODEL)
  await million(
    keyed,
    shape === 'distinct'
      ? '~600-character prompts sharing nothing'
      : '~600-character prompts, documents × questions (20,000 × 50) question-major',
    1024 * MiB,
  )
}
