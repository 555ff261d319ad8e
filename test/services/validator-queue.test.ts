import { afterAll, expect, test } from 'bun:test'
import type { Server } from '../../src/compose'
import * as validator from '../../src/services/validator'
import { makeTestApp } from '../helpers/app'
import { jsonl, line, makeBatch, makeCatalogEntry, nextBatchEvent } from '../helpers/batches'
import { makeUser } from '../helpers/builders'

// The validator's queue (docs/api.md §6): batches are validated a few at a time, so a large file being
// read never holds up a small batch created after it.

const t = makeTestApp()
afterAll(() => t.close())

const waitFor = nextBatchEvent

test('a small batch is validated while a large file is still being read', async () => {
  const model = (await makeCatalogEntry(t)).id
  const user = await makeUser(t)
  const large = await makeBatch(t, user, jsonl([line('l1', model), line('l2', model)]))

  // The large file's stream gives its first chunk, then holds until the small batch is done.
  let release = () => {}
  const held = new Promise<void>((resolve) => {
    release = resolve
  })
  const blobs = t.deps.blobs
  const read = blobs.read.bind(blobs)
  blobs.read = async (key) => {
    const stream = await read(key)
    if (key !== large.input_file_id || !stream) return stream
    const reader = stream.getReader()
    let first = true
    return new ReadableStream<Uint8Array>({
      async pull(c) {
        if (!first) await held
        first = false
        const { done, value } = await reader.read()
        if (done) c.close()
        else c.enqueue(value)
      },
    })
  }

  const largeProgress = waitFor(t.deps, large.id, 'progress')
  const largeDone = waitFor(t.deps, large.id, 'done')
  const stop = validator.start(t.deps)
  try {
    await largeProgress
    const small = await makeBatch(t, user, jsonl([line('s1', model)]))
    const smallDone = await waitFor(t.deps, small.id, 'done')
    expect(smallDone).toMatchObject({ data: { status: 'validated' } })
    expect((await t.deps.store.batches.get(large.id, null))?.status).toBe('validating')
    release()
    expect(await largeDone).toMatchObject({ data: { status: 'validated', request_counts: { total: 2 } } })
  } finally {
    release()
    blobs.read = read
    await stop()
  }
})

/** Resolves once `batchId` has left `validating` (listening first, so the event is never missed). */
async function settled(deps: Server, batchId: string) {
  const done = waitFor(deps, batchId, 'done')
  const row = await deps.store.batches.get(batchId, null)
  if (row?.status === 'validating') await done
}

test('batches beyond the concurrency wait their turn and are all validated', async () => {
  const model = (await makeCatalogEntry(t)).id
  const user = await makeUser(t)
  const stop = validator.start(t.deps)
  try {
    const made = await Promise.all(
      Array.from({ length: validator.VALIDATION_CONCURRENCY * 3 }, async (_, i) => {
        const b = await makeBatch(t, user, jsonl([line(`r${i}`, model)]))
        return b.id
      }),
    )
    for (const id of made) await settled(t.deps, id)
    for (const id of made) expect((await t.deps.store.batches.get(id, null))?.status).toBe('validated')
  } finally {
    await stop()
  }
})

test('the queued batches that fill the free places are leased in one statement', async () => {
  const model = (await makeCatalogEntry(t)).id
  const user = await makeUser(t)
  const made: string[] = []
  for (let i = 0; i < validator.VALIDATION_CONCURRENCY; i++)
    made.push((await makeBatch(t, user, jsonl([line(`q${i}`, model)]))).id)
  const store = t.deps.store.batches
  const lease = store.leaseValidations
  const calls: string[][] = []
  store.leaseValidations = (ids, ...rest) => {
    calls.push(ids)
    return lease.call(store, ids, ...rest)
  }
  const stop = validator.start(t.deps)
  try {
    for (const id of made) await settled(t.deps, id)
    // Recovered at start: one lease for all of them, not one each.
    expect(calls[0]?.toSorted()).toEqual(made.toSorted())
  } finally {
    await stop()
    store.leaseValidations = lease
  }
})

test('a run frees its place when its outcome goes to the writer: the next batches are read meanwhile', async () => {
  const model = (await makeCatalogEntry(t)).id
  const user = await makeUser(t)
  const first: string[] = []
  for (let i = 0; i < validator.VALIDATION_CONCURRENCY; i++)
    first.push((await makeBatch(t, user, jsonl([line(`f${i}`, model)]))).id)
  const store = t.deps.store.batches
  const finishValidations = store.finishValidations
  const lease = store.leaseValidations
  // Every write of outcomes is held until the batch beyond the first places has been leased.
  let release = () => {}
  const held = new Promise<void>((resolve) => {
    release = resolve
  })
  const written: string[][] = []
  store.finishValidations = async (items, now) => {
    await held
    written.push(items.map((i) => i.batchId))
    return finishValidations.call(store, items, now)
  }
  const firstIds = new Set(first)
  const extraLeased = new Promise<string>((resolve) => {
    store.leaseValidations = async (ids, ...rest) => {
      const rows = await lease.call(store, ids, ...rest)
      const other = rows.find((r) => !firstIds.has(r.id))
      if (other) resolve(other.id)
      return rows
    }
  })
  const stop = validator.start(t.deps)
  try {
    // Every place is taken by a run of the first batches (all of them leased at start).
    while (t.deps.validating.size < first.length) await new Promise((r) => setImmediate(r))
    const extra = (await makeBatch(t, user, jsonl([line('extra', model)]))).id
    expect(await extraLeased).toBe(extra)
    expect(written).toEqual([])
    release()
    for (const id of [...first, extra]) await settled(t.deps, id)
    for (const id of [...first, extra]) expect((await store.get(id, null))?.status).toBe('validated')
  } finally {
    release()
    await stop()
    store.finishValidations = finishValidations
    store.leaseValidations = lease
  }
})
