import { afterAll, describe, expect, test } from 'bun:test'
import { JOIN_LEASE_SECONDS } from '../../src/domain/shards'
import { joinShards } from '../../src/modules/workers/results'
import { runOnce as sweep } from '../../src/services/sweeper'
import { makeTestApp, type TestApp } from '../helpers/app'
import { strayBlobs } from '../helpers/blobs'
import { joinedOnce, splitBatch, stopAt } from '../helpers/joins'
import { until } from '../helpers/until'
import { batchRow } from '../helpers/workers'

// docs/api.md §16: the join of a split batch's shards happens once, whoever tries it (the upload that
// brought the last requests, the sweeper), and a joiner that loses, stalls or dies leaves nothing
// behind: no blob that no file row or shard refers to, no half file (test/helpers/joins.ts).

const apps: TestApp[] = []
afterAll(async () => {
  for (const t of apps) await t.close()
})

const app = () => {
  // Shards of 10 to 100 requests: 30 requests over three shard-capable workers are three of 10.
  const t = makeTestApp({ SHARD_MIN_REQUESTS: '10', SHARD_MAX_REQUESTS: '100' })
  apps.push(t)
  return t
}

describe('docs/api.md §16 the join happens once', () => {
  test('two joins at once: one joins, the other takes nothing and writes nothing', async () => {
    const s = await splitBatch(app())
    // The upload's join dies before it starts: the batch waits for a join with every shard done.
    const died = stopAt(s.t.deps.store.queue, 'takeJoin')
    void s.uploadLast()
    await died
    const stored = await strayBlobs(s.t.deps)
    const [one, other] = await Promise.all([joinShards(s.t.deps, s.batchId), joinShards(s.t.deps, s.batchId)])
    expect([one, other].filter((b) => b !== null)).toHaveLength(1)
    expect(stored.length).toBe(3) // the three shards' parts, then none
    await joinedOnce(s)
  })

  test('the sweeper leaves a join that runs alone', async () => {
    const s = await splitBatch(app())
    const go = Promise.withResolvers<void>()
    const stalled = stopAt(s.t.deps.store.queue, 'completeSplit', go.promise)
    const uploaded = s.uploadLast()
    await stalled
    // The upload's join holds the lease: the sweeper's pass joins nothing.
    expect(await s.t.deps.store.queue.joinsDue(s.t.clock.now())).toEqual([])
    await sweep(s.t.deps)
    expect((await batchRow(s.t.deps, s.batchId)).status).toBe('in_progress')
    go.resolve()
    expect((await uploaded).status).toBe(200)
    await joinedOnce(s)
  })
})

describe('docs/api.md §16 a joiner that dies or stalls leaves nothing behind', () => {
  test('died with its files written, before completing: the sweeper removes them once the lease lapses, then joins', async () => {
    const s = await splitBatch(app())
    const died = stopAt(s.t.deps.store.queue, 'completeSplit')
    void s.uploadLast()
    await died
    // The dead joiner's output file is whole and published, and nothing refers to it.
    expect((await strayBlobs(s.t.deps)).length).toBe(4)
    await sweep(s.t.deps)
    expect((await batchRow(s.t.deps, s.batchId)).status).toBe('in_progress')
    s.t.clock.advance(JOIN_LEASE_SECONDS)
    await sweep(s.t.deps)
    await joinedOnce(s)
  })

  test('died mid-write: the sweeper removes the half file it left, then joins', async () => {
    const s = await splitBatch(app())
    const parts = (await s.t.deps.store.queue.shardsOf(s.batchId)).map((p) => p.output_key)
    // It dies reading the second shard's part: the first one's lines are half a file.
    const died = stopAt(s.t.deps.blobs, 'read', undefined, ((key: string) => key !== parts[0]) as never)
    void s.uploadLast()
    await died
    // On local disk its output and error files are half written (`.part`) when it dies.
    if (s.t.deps.blobs.engine === 'local')
      await until(
        'its half files',
        async () => (await strayBlobs(s.t.deps)).filter((k) => k.endsWith('.part')).length === 2,
      )
    s.t.clock.advance(JOIN_LEASE_SECONDS)
    await sweep(s.t.deps)
    await joinedOnce(s)
  })

  test('died after completing, before removing the parts: the sweeper removes them once the lease lapses', async () => {
    const s = await splitBatch(app())
    const died = stopAt(s.t.deps.blobs, 'remove')
    void s.uploadLast()
    await died
    expect((await batchRow(s.t.deps, s.batchId)).status).toBe('completed')
    expect((await strayBlobs(s.t.deps)).length).toBe(3)
    s.t.clock.advance(JOIN_LEASE_SECONDS)
    await sweep(s.t.deps)
    await joinedOnce(s)
  })

  test('stalled past its lease before completing: the sweeper joins; the stalled joiner, fenced, removes its files', async () => {
    const s = await splitBatch(app())
    const go = Promise.withResolvers<void>()
    const stalled = stopAt(s.t.deps.store.queue, 'completeSplit', go.promise)
    const uploaded = s.uploadLast()
    await stalled
    s.t.clock.advance(JOIN_LEASE_SECONDS)
    await sweep(s.t.deps)
    expect((await batchRow(s.t.deps, s.batchId)).status).toBe('completed')
    go.resolve()
    expect((await uploaded).status).toBe(200)
    await joinedOnce(s)
  })

  test('stalled past its lease mid-write: the sweeper joins; the stalled joiner stops at its next renewal and removes its files', async () => {
    const s = await splitBatch(app())
    const go = Promise.withResolvers<void>()
    const renewals: boolean[] = []
    const renew = s.t.deps.store.queue.renewJoin
    s.t.deps.store.queue.renewJoin = async (r) => {
      renewals.push(await renew(r))
      return renewals.at(-1)!
    }
    // It stalls writing the first shard's part into its output, before the second shard's renewal.
    const stalled = Promise.withResolvers<void>()
    let joining = 0
    const take = s.t.deps.store.queue.takeJoin
    s.t.deps.store.queue.takeJoin = (r) => {
      joining++
      return take(r)
    }
    const create = s.t.deps.blobs.create.bind(s.t.deps.blobs)
    s.t.deps.blobs.create = (key) => {
      const writer = create(key)
      if (joining !== 1) return writer
      joining++
      return {
        ...writer,
        write: async (chunk) => {
          stalled.resolve()
          await go.promise
          return writer.write(chunk)
        },
      }
    }
    const uploaded = s.uploadLast()
    await stalled.promise
    s.t.clock.advance(JOIN_LEASE_SECONDS)
    await sweep(s.t.deps)
    expect((await batchRow(s.t.deps, s.batchId)).status).toBe('completed')
    go.resolve()
    expect((await uploaded).status).toBe(200)
    // Its renewal was refused: the lease had gone to the sweeper's join.
    expect(renewals).toEqual([false])
    await joinedOnce(s)
  })

  test('a long copy renews its lease as it goes: past several leases mid-part, the join is never due to another', async () => {
    const s = await splitBatch(app())
    const { queue } = s.t.deps.store
    let joining = false
    const take = queue.takeJoin
    queue.takeJoin = (r) => {
      joining = true
      return take(r)
    }
    // The join reads each part in pieces of 16 bytes (a part of many chunks).
    const read = s.t.deps.blobs.read.bind(s.t.deps.blobs)
    s.t.deps.blobs.read = async (key) => {
      const part = await read(key)
      if (!part || !joining) return part
      const pieces = (async function* () {
        for await (const chunk of part)
          for (let i = 0; i < chunk.length; i += 16) yield chunk.subarray(i, i + 16)
      })()
      return new ReadableStream<Uint8Array>({
        async pull(c) {
          const next = await pieces.next()
          if (next.done) c.close()
          else c.enqueue(next.value)
        },
      })
    }
    // Each piece the join writes takes half a lease; after each, whether another could take the join.
    const due: string[][] = []
    let writes = 0
    const create = s.t.deps.blobs.create.bind(s.t.deps.blobs)
    s.t.deps.blobs.create = (key) => {
      const writer = create(key)
      if (!joining) return writer
      return {
        ...writer,
        write: async (chunk) => {
          await writer.write(chunk)
          writes++
          s.t.clock.advance(JOIN_LEASE_SECONDS / 2)
          due.push(await queue.joinsDue(s.t.clock.now()))
        },
      }
    }
    const started = s.t.clock.now()
    expect((await s.uploadLast()).status).toBe(200)
    // The first part alone took several leases' time; the lease never lapsed.
    expect(writes).toBeGreaterThan(3 * 6)
    expect(s.t.clock.now() - started).toBeGreaterThan(3 * JOIN_LEASE_SECONDS)
    expect(due.filter((d) => d.length > 0)).toEqual([])
    await joinedOnce(s)
  })
})

describe('docs/api.md §16 a join whose completion fails leaves no half state', () => {
  test('completeSplit throws before it commits: the shard is stored, the join is taken again once the lease lapses, the output is there once', async () => {
    const s = await splitBatch(app())
    const { queue } = s.t.deps.store
    const complete = queue.completeSplit
    let calls = 0
    queue.completeSplit = async (r) => {
      if (++calls === 1) throw new Error('storage error: the connection broke')
      return complete(r)
    }
    expect((await s.uploadLast()).status).toBe(200)
    expect(calls).toBe(1)
    expect((await batchRow(s.t.deps, s.batchId)).status).toBe('in_progress')
    // Its files are written and nothing refers to them: the lease lists them (the parts stay too).
    expect((await strayBlobs(s.t.deps)).length).toBe(4)
    // Until its lease lapses the join is no one else's: the sweeper's pass leaves it.
    expect(await queue.joinsDue(s.t.clock.now())).toEqual([])
    s.t.clock.advance(JOIN_LEASE_SECONDS)
    expect(await queue.joinsDue(s.t.clock.now())).toEqual([s.batchId])
    await sweep(s.t.deps)
    expect(calls).toBe(2)
    await joinedOnce(s)
  })

  test('completeSplit commits, then throws (the answer lost): the batch is completed once; the sweeper removes only the parts', async () => {
    const s = await splitBatch(app())
    const { queue } = s.t.deps.store
    const complete = queue.completeSplit
    let calls = 0
    queue.completeSplit = async (r) => {
      const done = await complete(r)
      if (++calls === 1) throw new Error('storage error: the answer was lost')
      return done
    }
    expect((await s.uploadLast()).status).toBe(200)
    const completed = await batchRow(s.t.deps, s.batchId)
    expect(completed.status).toBe('completed')
    // The three parts are left, listed in the lease for whoever takes it next.
    expect((await strayBlobs(s.t.deps)).length).toBe(3)
    s.t.clock.advance(JOIN_LEASE_SECONDS)
    await sweep(s.t.deps)
    // Nothing joined again: the same files, and no second completion.
    expect(calls).toBe(1)
    expect((await batchRow(s.t.deps, s.batchId)).output_file_id).toBe(completed.output_file_id)
    await joinedOnce(s)
  })
})
