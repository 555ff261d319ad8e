import { afterAll, expect, test } from 'bun:test'
import { rmSync } from 'node:fs'
import { createApp } from '../../src/app'
import { createServer, type Server } from '../../src/compose'
import { startServer } from '../../src/index'
import { manualClock } from '../../src/lib/clock'
import * as validator from '../../src/services/validator'
import { buildRequest, capturingMailer, cheapPasswords, readRes, testConfig } from '../helpers/app'
import { jsonl, line, makeBatch, makeCatalogEntry, nextBatchEvent } from '../helpers/batches'
import { makeUser } from '../helpers/builders'

// A batch left `validating` by a crash or a restart is validated again at start (issue 3): the
// database is the validator's queue, and an interrupted run leaves no trace behind.

const config = testConfig()
afterAll(() => rmSync(config.DATA_DIR, { recursive: true, force: true }))

const depsFor = (clock = manualClock()) =>
  createServer(config, { clock, mailer: capturingMailer(), passwords: cheapPasswords() })
const target = (deps: Server) => {
  const app = createApp(deps)
  return {
    deps,
    req: async (m: string, p: string, o?: any) =>
      readRes(await app.handle(buildRequest('http://localhost', m, p, o))),
  }
}
const waitFor = nextBatchEvent

test('a batch interrupted mid-validation stays validating and is validated at the next start', async () => {
  const first = target(depsFor())
  const model = (await makeCatalogEntry(first, { id: 'restart-7b-q4km' })).id
  const user = await makeUser(first)
  // ~3 MB: several chunks, so the run can be interrupted between two of them.
  const lines = Array.from({ length: 3000 }, (_, i) =>
    line(`r${i}`, model, { body: { model, prompt: 'p'.repeat(1000) } }),
  )
  const batch = await makeBatch(first, user, jsonl(lines))

  // The first process starts validating (recovering the batch at start) and dies after one chunk.
  const progressed = waitFor(first.deps, batch.id, 'progress')
  const stop = validator.start(first.deps)
  await progressed
  await stop()
  const row = (await first.deps.store.batches.get(batch.id, null))!
  expect(row.status).toBe('validating')
  expect((await first.deps.store.batches.errorsOf([batch.id])).get(batch.id) ?? []).toEqual([])
  expect(first.deps.batchEvents.liveRun(batch.id)).toBeUndefined()
  await first.deps.store.close()

  // The restarted server picks it up without being asked, once the dead run's lease has lapsed
  // (PostgreSQL's instances lease a validation; SQLite's one process needs no lease).
  const deps = depsFor(manualClock(manualClock().now() + validator.VALIDATION_LEASE_SECONDS + 1))
  const done = waitFor(deps, batch.id, 'done')
  const server = await startServer(config, deps)
  try {
    expect(await done).toMatchObject({
      event: 'done',
      data: { batch_id: batch.id, status: 'validated', request_counts: { total: 3000 }, errors_total: 0 },
    })
    const res = await fetch(`${server.url}/v1/batches/${batch.id}`, {
      headers: { authorization: `Bearer ${user.token}` },
    })
    expect(await res.json()).toMatchObject({ status: 'validated', model, request_counts: { total: 3000 } })
  } finally {
    await server.stop()
  }
})

test('docs/api.md §6: a batch interrupted mid-validation gets its execution order from the run after the restart', async () => {
  const first = target(depsFor())
  const model = (await makeCatalogEntry(first, { id: 'restart-order-7b-q4km' })).id
  const user = await makeUser(first)
  // 40 documents × 50 questions, question-major (~2.7 MB: several chunks).
  const doc = (d: number) => `Document ${d}. ${'It goes on and on. '.repeat(64)}`
  const lines: string[] = []
  for (let q = 0; q < 50; q++)
    for (let d = 0; d < 40; d++)
      lines.push(
        line(`d${d}-q${q}`, model, {
          body: { model, messages: [{ role: 'user', content: `${doc(d)}\nQuestion ${q}?` }] },
        }),
      )
  const batch = await makeBatch(first, user, jsonl(lines))

  const progressed = waitFor(first.deps, batch.id, 'progress')
  const stop = validator.start(first.deps)
  await progressed
  await stop()
  const row = (await first.deps.store.batches.get(batch.id, null))!
  expect(row).toMatchObject({ status: 'validating', ordered: false })
  // The dead run left no index behind.
  expect(await first.deps.store.queue.lineSpans(batch.id, 0, 1)).toBeNull()
  await first.deps.store.close()

  const deps = depsFor(manualClock(manualClock().now() + validator.VALIDATION_LEASE_SECONDS + 1))
  const done = waitFor(deps, batch.id, 'done')
  const server = await startServer(config, deps)
  try {
    expect(await done).toMatchObject({ data: { status: 'validated', request_counts: { total: 2000 } } })
    expect((await deps.store.batches.get(batch.id, null))!.ordered).toBe(true)
    const res = await fetch(`${server.url}/v1/files/${batch.input_file_id}/content?batch=${batch.id}`, {
      headers: { authorization: `Bearer ${user.token}` },
    })
    const ids = (await res.text())
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l).custom_id)
    const documentMajor = Array.from({ length: 40 }, (_, d) =>
      Array.from({ length: 50 }, (_, q) => `d${d}-q${q}`),
    )
    expect(ids).toEqual(documentMajor.flat())
  } finally {
    await server.stop()
  }
})
