import { describe, expect, test } from 'bun:test'
import {
  type BackupCandidate,
  type CutShard,
  checkShardHolder,
  copyEnded,
  pickBackup,
  placeCut,
  type ShardHolding,
  shardCounts,
} from '../../src/domain/shards'
import { AppError } from '../../src/lib/errors'

// docs/api.md §16 backup copies: the rules every engine applies, decided once in src/domain/shards.ts.

const candidate = (o: Partial<BackupCandidate> & { shard_id: string }): BackupCandidate => ({
  seq: 1,
  worker_id: 'wrk_holder',
  assigned_at: 100,
  attempts: 0,
  backup_worker_id: null,
  batch_uncut: false,
  batch_waiting: false,
  loaded: false,
  ...o,
})

/** The error a rule throws: its status and code. */
function refusal(fn: () => unknown) {
  try {
    fn()
  } catch (e) {
    if (e instanceof AppError) return { status: e.status, code: e.errorCode }
    throw e
  }
  return null
}

describe('pickBackup', () => {
  test('the oldest held shard (assigned_at, then cut order) of a batch with nothing left to hand out', () => {
    const picks = [
      candidate({ shard_id: 'young', assigned_at: 120, seq: 1 }),
      candidate({ shard_id: 'old-later-cut', assigned_at: 100, seq: 7 }),
      candidate({ shard_id: 'old', assigned_at: 100, seq: 3 }),
    ]
    expect(pickBackup(picks, 'wrk_me', 3)?.shard_id).toBe('old')
  })

  test('never while the batch has a shard waiting or requests left to cut', () => {
    expect(pickBackup([candidate({ shard_id: 'a', batch_waiting: true })], 'wrk_me', 3)).toBeNull()
    expect(pickBackup([candidate({ shard_id: 'a', batch_uncut: true })], 'wrk_me', 3)).toBeNull()
  })

  test('never a second backup, never to the shard’s own holder', () => {
    expect(pickBackup([candidate({ shard_id: 'a', backup_worker_id: 'wrk_other' })], 'wrk_me', 3)).toBeNull()
    expect(pickBackup([candidate({ shard_id: 'a', worker_id: 'wrk_me' })], 'wrk_me', 3)).toBeNull()
    expect(pickBackup([candidate({ shard_id: 'a', worker_id: null })], 'wrk_me', 3)).toBeNull()
  })

  test('only while a failed copy cannot use up the shard’s attempts', () => {
    expect(pickBackup([candidate({ shard_id: 'a', attempts: 1 })], 'wrk_me', 3)?.shard_id).toBe('a')
    expect(pickBackup([candidate({ shard_id: 'a', attempts: 2 })], 'wrk_me', 3)).toBeNull()
    expect(pickBackup([candidate({ shard_id: 'a', attempts: 0 })], 'wrk_me', 1)).toBeNull()
  })

  test('a shard of a model loaded on the worker first (docs/api.md §7 Poll rule 5)', () => {
    const picks = [
      candidate({ shard_id: 'old', assigned_at: 10 }),
      candidate({ shard_id: 'loaded', assigned_at: 90, loaded: true }),
    ]
    expect(pickBackup(picks, 'wrk_me', 3)?.shard_id).toBe('loaded')
  })
})

describe('shardCounts', () => {
  test('the copy furthest along (completed + failed); the holder on a tie or without a backup', () => {
    expect(shardCounts({ completed: 5, failed: 1 }, null)).toEqual({ completed: 5, failed: 1 })
    expect(shardCounts({ completed: 5, failed: 1 }, { completed: 2, failed: 4 })).toEqual({
      completed: 5,
      failed: 1,
    })
    expect(shardCounts({ completed: 5, failed: 1 }, { completed: 7, failed: 0 })).toEqual({
      completed: 7,
      failed: 0,
    })
  })
})

describe('copyEnded', () => {
  test('the only copy is requeued; with two, the other carries on and one attempt is counted', () => {
    expect(copyEnded({ attempts: 0, backup_assignment_id: null }, 'holder', 'boom')).toEqual({
      kind: 'requeue',
    })
    expect(copyEnded({ attempts: 1, backup_assignment_id: 'asg_b' }, 'holder', 'boom')).toEqual({
      kind: 'promote',
      attempts: 2,
      error: 'boom',
    })
    expect(copyEnded({ attempts: 0, backup_assignment_id: 'asg_b' }, 'backup', 'x'.repeat(3000))).toEqual({
      kind: 'drop_backup',
      attempts: 1,
      error: 'x'.repeat(2000),
    })
  })

  test('not counted (a removed worker, src/domain/requeue.ts countsAttempt): the attempts stay', () => {
    expect(copyEnded({ attempts: 1, backup_assignment_id: 'asg_b' }, 'holder', 'gone', false)).toEqual({
      kind: 'promote',
      attempts: 1,
      error: 'gone',
    })
    expect(copyEnded({ attempts: 2, backup_assignment_id: 'asg_b' }, 'backup', 'gone', false)).toMatchObject({
      kind: 'drop_backup',
      attempts: 2,
    })
  })
})

describe('checkShardHolder with two copies', () => {
  const row = (o: Partial<ShardHolding> = {}): ShardHolding => ({
    status: 'running',
    worker_id: 'wrk_h',
    assignment_id: 'asg_h',
    backup_worker_id: 'wrk_b',
    backup_assignment_id: 'asg_b',
    batch_status: 'in_progress',
    ...o,
  })

  test('either copy writes, fenced by its own assignment', () => {
    expect(checkShardHolder(row(), 'wrk_h', 'asg_h')).toMatchObject({
      copy: 'holder',
      copy_assignment_id: 'asg_h',
    })
    expect(checkShardHolder(row(), 'wrk_b', 'asg_b')).toMatchObject({
      copy: 'backup',
      copy_assignment_id: 'asg_b',
    })
    expect(checkShardHolder(row(), 'wrk_b', undefined)).toMatchObject({ copy: 'backup' })
    expect(refusal(() => checkShardHolder(row(), 'wrk_b', 'asg_h'))).toEqual({
      status: 403,
      code: 'stale_assignment',
    })
    expect(refusal(() => checkShardHolder(row(), 'wrk_x', undefined))).toEqual({
      status: 403,
      code: 'not_assigned',
    })
  })

  test('once done, the copy that lost hears 409 shard_done_elsewhere; the batch failing, 409 batch_not_in_progress', () => {
    const done = row({ status: 'done', batch_status: 'completed' })
    expect(refusal(() => checkShardHolder(done, 'wrk_b', 'asg_b'))).toEqual({
      status: 409,
      code: 'shard_done_elsewhere',
    })
    expect(refusal(() => checkShardHolder(row({ status: 'done' }), 'wrk_b', undefined))).toEqual({
      status: 409,
      code: 'shard_done_elsewhere',
    })
    // The winner's own writes after its upload are not its to make any more.
    expect(refusal(() => checkShardHolder(row({ status: 'done' }), 'wrk_h', 'asg_h'))).toEqual({
      status: 403,
      code: 'not_assigned',
    })
    const failed = row({ status: 'waiting', batch_status: 'failed' })
    expect(refusal(() => checkShardHolder(failed, 'wrk_b', 'asg_b'))).toEqual({
      status: 409,
      code: 'batch_not_in_progress',
    })
  })
})

describe('docs/api.md §16 placeCut: shards of a batch in an execution order of its own follow its groups', () => {
  const shard = (
    first_request: number,
    requests: number,
    worker_id: string | null,
    seq: number,
    status: CutShard['status'] = 'running',
  ): CutShard => ({
    first_request,
    requests,
    worker_id,
    status,
    seq,
  })

  test('the first cut starts at the beginning', () => {
    expect(placeCut([], 1000, 'w1', 250)).toEqual({ first: 0, requests: 250 })
  })

  test('a worker continues where its latest shard ends, while that is not cut', () => {
    const cut = [shard(0, 250, 'w1', 1), shard(625, 250, 'w2', 2)]
    expect(placeCut(cut, 1000, 'w1', 250)).toEqual({ first: 250, requests: 250 })
    // The shard stops where the next shard starts.
    expect(placeCut(cut, 1000, 'w1', 500)).toEqual({ first: 250, requests: 375 })
    expect(placeCut(cut, 1000, 'w2', 100)).toEqual({ first: 875, requests: 100 })
    // Its latest shard counts, done or running, not an earlier one.
    const later = [shard(0, 100, 'w1', 1, 'done'), shard(100, 100, 'w2', 2), shard(500, 100, 'w1', 3, 'done')]
    expect(placeCut(later, 1000, 'w1', 50)).toEqual({ first: 600, requests: 50 })
  })

  test('a newcomer takes the middle of the largest gap another worker continues, else its start', () => {
    // w1 runs [0, 250): the rest is its to continue; w2 starts halfway through it.
    expect(placeCut([shard(0, 250, 'w1', 1)], 1000, 'w2', 250)).toEqual({ first: 625, requests: 250 })
    // A gap nobody continues (its shard is done, its worker gone on) is taken from its start.
    expect(placeCut([shard(0, 250, 'w1', 1, 'done')], 1000, 'w2', 250)).toEqual({ first: 250, requests: 250 })
    // The largest of several gaps: [300, 700), continued by w2 — halved; once w2's shard is done,
    // taken from its start.
    const cut = [shard(0, 100, 'w1', 1), shard(200, 100, 'w2', 2), shard(700, 300, 'w3', 3)]
    expect(placeCut(cut, 1000, 'w4', 100)).toEqual({ first: 500, requests: 100 })
    cut[1] = shard(200, 100, 'w2', 2, 'done')
    expect(placeCut(cut, 1000, 'w4', 100)).toEqual({ first: 300, requests: 100 })
  })

  test('a worker whose continuation is taken steals like a newcomer; nothing left: null', () => {
    const cut = [shard(0, 500, 'w1', 1, 'done'), shard(500, 200, 'w2', 2), shard(900, 100, 'w1', 3)]
    // w1's latest ends at the batch's end: it halves the gap w2 continues.
    expect(placeCut(cut, 1000, 'w1', 300)).toEqual({ first: 800, requests: 100 })
    expect(placeCut([shard(0, 1000, 'w1', 1)], 1000, 'w2', 100)).toBeNull()
  })
})
