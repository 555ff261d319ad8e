import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { JOIN_LEASE_SECONDS } from '../../src/domain/shards'
import { manualClock } from '../../src/lib/clock'
import { joinShards } from '../../src/modules/workers/results'
import { startTestServer, type TestServer } from '../helpers/app'
import { strayBlobs } from '../helpers/blobs'
import { joinedOnce, type Split, splitBatch, stopAt } from '../helpers/joins'
import { freshPostgresUrl } from '../helpers/postgres'
import { describeWith, postgres } from '../helpers/requires'
import { type S3Server, startS3Server } from '../helpers/s3'
import { batchRow } from '../helpers/workers'

// docs/api.md §16, §12: two instances on one PostgreSQL database and one S3 bucket. Each may join a
// split batch (the upload that brings its last requests, the sweeper): the join happens once, and
// one that loses or dies leaves nothing in the bucket that no file row refers to.

describeWith(postgres, 'PostgreSQL and S3, two instances', () => {
  let s3: S3Server
  let a: TestServer
  let b: TestServer
  let dir: string

  beforeAll(async () => {
    s3 = await startS3Server()
    dir = mkdtempSync(join(tmpdir(), 'gridkeep-cluster-join-'))
    // One database and one bucket prefix; shards of 10 to 100 requests (test/helpers/joins.ts).
    const env = {
      DATABASE_URL: await freshPostgresUrl(),
      ...s3.env(),
      SHARD_MIN_REQUESTS: '10',
      SHARD_MAX_REQUESTS: '100',
      // A join that died here holds its upload's request open: the stop cuts it.
      SHUTDOWN_TIMEOUT_SECONDS: '1',
    }
    a = await startTestServer({ ...env, DATA_DIR: join(dir, 'a') }, { clock: manualClock() })
    b = await startTestServer({ ...env, DATA_DIR: join(dir, 'b') }, { clock: manualClock() })
  })
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()])
    await s3?.close()
    rmSync(dir, { recursive: true, force: true })
  })

  test('one instance’s upload and the other’s sweeper take the join at the same moment: one joins, nothing is left over', async () => {
    const splits: Split[] = []
    for (let i = 0; i < 6; i++) splits.push(await splitBatch(a))
    // The instances' clocks agree (a lease is read by the other's clock).
    b.clock.advance(a.clock.now() - b.clock.now())
    for (const [i, s] of splits.entries()) {
      // a's upload is about to take the join, every shard done; b tries it at the same moment (its
      // connections warm), one or the other asking first.
      expect(await b.deps.store.queue.joinsDue(b.clock.now())).toEqual([])
      const go = Promise.withResolvers<void>()
      const taking = stopAt(a.deps.store.queue, 'takeJoin', go.promise)
      const uploaded = s.uploadLast(a)
      await taking
      if (i % 2) go.resolve()
      const byB = joinShards(b.deps, s.batchId)
      go.resolve()
      const [up, joinedByB] = await Promise.all([uploaded, byB])
      expect(up.status).toBe(200)
      // The upload answers the batch's files when its own join completed the batch.
      const joinedByA = up.body.output_file_id !== null
      expect([joinedByA, joinedByB !== null].filter(Boolean)).toHaveLength(1)
    }
    // The bucket is shared: what is left over is looked for once every batch is joined.
    for (const s of splits) await joinedOnce(s)
  })

  test('a joiner that died between its steps on one instance: the other takes the join over once its lease lapses', async () => {
    const s = await splitBatch(a)
    // a's join dies with its output file whole in the bucket, before completing the batch.
    const died = stopAt(a.deps.store.queue, 'completeSplit')
    void s.uploadLast(a).catch(() => {})
    await died
    expect((await strayBlobs(b.deps)).length).toBe(4)
    // b's clock is at a's, past the sweeper's startup grace: the lease is a's.
    b.clock.advance(a.clock.now() - b.clock.now())
    expect(await joinShards(b.deps, s.batchId)).toBeNull()
    b.clock.advance(JOIN_LEASE_SECONDS)
    expect(await joinShards(b.deps, s.batchId)).toMatchObject({ status: 'completed' })
    await joinedOnce(s)
  })

  test('a joiner that died after completing, before removing the parts: the other removes them', async () => {
    const s = await splitBatch(a)
    const died = stopAt(a.deps.blobs, 'remove')
    void s.uploadLast(a).catch(() => {})
    await died
    expect((await batchRow(b.deps, s.batchId)).status).toBe('completed')
    expect((await strayBlobs(b.deps)).length).toBe(3)
    b.clock.advance(a.clock.now() + JOIN_LEASE_SECONDS - b.clock.now())
    expect(await b.deps.store.queue.joinsDue(b.clock.now())).toContain(s.batchId)
    expect(await joinShards(b.deps, s.batchId)).toBeNull()
    await joinedOnce(s)
  })
})
