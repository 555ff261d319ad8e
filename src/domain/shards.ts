import { conflict, forbidden } from '../lib/errors'
import { truncateError } from './requeue'

// Shards (docs/api.md §16): how a batch is cut into contiguous runs of its request lines (in its
// execution order, docs/api.md §6) and handed to every worker that can serve it. Pure rules over plain numbers, decided here once; each storage
// engine applies them inside its claim transaction.

export interface ShardBounds {
  /** SHARD_MIN_REQUESTS: the smallest shard; a batch of at most twice this is never split. */
  min: number
  /** SHARD_MAX_REQUESTS: the largest shard; 0 turns sharding off. */
  max: number
}

/**
 * Whether a batch of `total` requests is handed out as shards: sharding on, more than twice the
 * smallest shard, and a request-line index written by validation (a batch validated before the
 * index existed runs whole).
 */
export function splittable(total: number, bounds: ShardBounds, indexed: boolean): boolean {
  return bounds.max > 0 && total > 2 * bounds.min && indexed
}

/**
 * Guided self-scheduling (OpenMP `schedule(guided)`): the next shard takes
 * ceil(unclaimed ÷ eligible workers) requests, bounded by [min, max]; the last shard is whatever
 * remains, however small (merging a small remainder into the shard before it would make the batch's
 * last shard its slowest).
 */
export function nextShardSize(unclaimed: number, eligibleWorkers: number, bounds: ShardBounds): number {
  if (unclaimed <= 0) return 0
  const guided = Math.ceil(unclaimed / Math.max(1, eligibleWorkers))
  return Math.min(bounds.max, Math.max(bounds.min, guided), unclaimed)
}

export type ShardState = 'waiting' | 'running' | 'done'

/** A shard already cut from a batch, as the cut rule reads it. */
export interface CutShard {
  first_request: number
  requests: number
  /** Its holder (the copy whose output it kept, once done); null while it waits. */
  worker_id: string | null
  status: ShardState
  /** Cut order (batch_shards.seq): a worker's latest shard is its highest. */
  seq: number
}

/**
 * docs/api.md §16, for a batch in an execution order of its own (§6): where the next shard of `size`
 * requests starts, so that a prefix group stays with one worker. Positions not yet cut form gaps
 * between the shards cut so far. A worker whose latest shard of the batch ends where a gap starts
 * continues it (the next lines share its engine's cache). Otherwise it takes the largest gap — from
 * its start when no running shard ends there, else from its middle, leaving the first half to the
 * worker that continues it (work stealing: a group is split at most where a gap is halved). The
 * shard stops at the gap's end. Null when every request is cut.
 */
export function placeCut(
  cut: readonly CutShard[],
  total: number,
  workerId: string,
  size: number,
): { first: number; requests: number } | null {
  const sorted = [...cut].sort((a, b) => a.first_request - b.first_request)
  const gaps: { start: number; end: number }[] = []
  let at = 0
  for (const s of sorted) {
    if (s.first_request > at) gaps.push({ start: at, end: s.first_request })
    at = Math.max(at, s.first_request + s.requests)
  }
  if (at < total) gaps.push({ start: at, end: total })
  if (gaps.length === 0 || size <= 0) return null
  let mine: CutShard | null = null
  for (const s of cut) if (s.worker_id === workerId && (!mine || s.seq > mine.seq)) mine = s
  const own = mine && gaps.find((g) => g.start === mine.first_request + mine.requests)
  if (own) return { first: own.start, requests: Math.min(size, own.end - own.start) }
  let gap = gaps[0]!
  for (const g of gaps) if (g.end - g.start > gap.end - gap.start) gap = g
  const continued = cut.some((s) => s.status === 'running' && s.first_request + s.requests === gap.start)
  const first = continued ? gap.start + Math.floor((gap.end - gap.start) / 2) : gap.start
  return { first, requests: Math.min(size, gap.end - first) }
}

/** The batch object's `shards` (docs/api.md §16): how many shards are in each state. */
export interface ShardTally {
  total: number
  waiting: number
  running: number
  done: number
}

export function tallyShards(states: readonly { status: ShardState; n: number }[]): ShardTally {
  const t: ShardTally = { total: 0, waiting: 0, running: 0, done: 0 }
  for (const s of states) {
    t[s.status] += s.n
    t.total += s.n
  }
  return t
}

/** Shard job ids carry their own prefix: a job id names a shard or a whole batch, never both. */
export const SHARD_ID_PREFIX = 'shard_'
export const isShardId = (jobId: string) => jobId.startsWith(SHARD_ID_PREFIX)

/** What an engine reads about the shard a worker says it works on. */
export interface ShardHolding {
  status: ShardState
  worker_id: string | null
  assignment_id: string | null
  /** docs/api.md §16 backup copies: the backup's lease (while running), or the copy that lost (done). */
  backup_worker_id: string | null
  backup_assignment_id: string | null
  batch_status: string
}

/** docs/api.md §16: the answer to the copy that lost a backup race; its daemon drops the job. */
export const shardDoneElsewhere = () =>
  conflict('shard_done_elsewhere', 'Another copy of this shard finished first; drop the job')

/** Which copy of a shard a write comes from: its holder's, or its backup's (docs/api.md §16). */
export type ShardCopy = 'holder' | 'backup'

/**
 * docs/api.md §16: progress, results and failures of a shard come only from one of its current copies
 * — its holder's or its backup's lease (the §7 holder rule and fencing, per shard and per copy). A
 * shard this worker held whose batch has failed meanwhile answers 409 `batch_not_in_progress`, and
 * the copy that lost a backup race answers 409 `shard_done_elsewhere`: either way the daemon drops
 * the job. Returns the row with which copy wrote and that copy's assignment.
 */
export function checkShardHolder<T extends ShardHolding>(
  row: T | undefined | null,
  workerId: string,
  assignmentId: string | undefined,
): T & { copy: ShardCopy; copy_assignment_id: string } {
  const copy: ShardCopy | null = !row
    ? null
    : row.worker_id === workerId && row.assignment_id !== null
      ? 'holder'
      : row.backup_worker_id === workerId && row.backup_assignment_id !== null
        ? 'backup'
        : null
  if (!row || !copy) throw forbidden('not_assigned', 'This shard is not assigned to this worker')
  const lease = (copy === 'holder' ? row.assignment_id : row.backup_assignment_id)!
  const stale = assignmentId !== undefined && assignmentId !== lease
  if (row.status === 'done' && copy === 'backup') {
    if (stale) throw forbidden('stale_assignment', 'This assignment is no longer current; stop the job')
    throw shardDoneElsewhere()
  }
  if (row.batch_status !== 'in_progress') {
    throw conflict('batch_not_in_progress', 'The batch of this shard is no longer in progress; drop the job')
  }
  if (row.status !== 'running') throw forbidden('not_assigned', 'This shard is not assigned to this worker')
  if (stale) throw forbidden('stale_assignment', 'This assignment is no longer current; stop the job')
  return { ...row, copy, copy_assignment_id: lease }
}

// ---------------------------------------------------------------------------------------------
// Backup copies (docs/api.md §16; MapReduce's backup tasks): when a split batch has nothing left to
// hand out, an otherwise idle worker runs a copy of its oldest running shard, and the first complete
// upload wins.

/** A running shard a poll might back up, with what the rule reads of it and its batch. */
export interface BackupCandidate {
  shard_id: string
  /** Cut order across batches (batch_shards.seq): the tie-break after assigned_at. */
  seq: number
  /** The holder. */
  worker_id: string | null
  assigned_at: number | null
  attempts: number
  backup_worker_id: string | null
  /** The batch still has requests not cut into a shard. */
  batch_uncut: boolean
  /** The batch has a shard waiting (requeued). */
  batch_waiting: boolean
  /** docs/api.md §7 Poll rule 5: the batch's model is loaded on the polling worker. */
  loaded: boolean
}

/**
 * docs/api.md §16: the shard a poll that found nothing else to claim backs up, or null. Only a shard
 * of a batch with nothing left to hand out (no shard waiting, no request left to cut), without a
 * backup already, held by another worker, and whose attempts a failed copy cannot use up (attempts
 * + 1 below MAX_BATCH_ATTEMPTS: a copy's failure counts one, and must never fail the batch while the
 * other copy runs). Loaded models first (Poll rule 5), then the oldest held (assigned_at), then cut
 * order. Any such shard qualifies however briefly it has been held: the backup only ever runs on
 * capacity that would otherwise idle.
 */
export function pickBackup<C extends BackupCandidate>(
  candidates: readonly C[],
  workerId: string,
  maxAttempts: number,
): C | null {
  let best: C | null = null
  for (const c of candidates) {
    if (c.batch_uncut || c.batch_waiting || c.backup_worker_id !== null) continue
    if (c.worker_id === null || c.worker_id === workerId || c.attempts + 1 >= maxAttempts) continue
    if (
      !best ||
      (c.loaded && !best.loaded) ||
      (c.loaded === best.loaded &&
        ((c.assigned_at ?? 0) < (best.assigned_at ?? 0) ||
          ((c.assigned_at ?? 0) === (best.assigned_at ?? 0) && c.seq < best.seq)))
    )
      best = c
  }
  return best
}

/** A copy's live counts. */
export interface CopyCounts {
  completed: number
  failed: number
}

/**
 * docs/api.md §16: a shard's live counts (what the batch's request_counts sum) are those of its copy
 * furthest along — completed + failed — the holder's on a tie or without a backup.
 */
export function shardCounts(holder: CopyCounts, backup: CopyCounts | null): CopyCounts {
  return backup && backup.completed + backup.failed > holder.completed + holder.failed ? backup : holder
}

/** How one copy of a running shard ends without results (report-failure, a silent worker, re-registration). */
export type CopyEnd =
  /** It was the shard's only copy: the requeue rule, per shard. */
  | { kind: 'requeue' }
  /**
   * The other copy carries on, nothing is requeued: `promote` (the holder ended; its backup now
   * holds the shard) or `drop_backup` (the backup ended; the holder carries on). Either counts one
   * attempt of the shard (a failed run) and stores the error on the batch.
   */
  | { kind: 'promote' | 'drop_backup'; attempts: number; error: string }

/**
 * docs/api.md §16: what becomes of a running shard when one of its copies ends without results;
 * not `counted` (src/domain/requeue.ts countsAttempt: a removed worker), its attempts stay.
 */
export function copyEnded(
  shard: { attempts: number; backup_assignment_id: string | null },
  copy: ShardCopy,
  errorText: string,
  counted = true,
): CopyEnd {
  if (copy === 'holder' && shard.backup_assignment_id === null) return { kind: 'requeue' }
  return {
    kind: copy === 'holder' ? 'promote' : 'drop_backup',
    attempts: shard.attempts + (counted ? 1 : 0),
    error: truncateError(errorText),
  }
}

/**
 * docs/api.md §16: how long the join of a split batch's shards is its joiner's without a renewal.
 * The joiner renews it every third of that while it writes, so another may take the join over only
 * from a joiner that died or stalled that long — and that one's next renewal, or its completion,
 * finds the lease gone and it stops.
 */
export const JOIN_LEASE_SECONDS = 60

/** A join's lease as stored (batch_joins): its joiner, until when, and the blobs it may have left. */
export interface JoinLease {
  joiner: string
  lease_until: number
  blobs: readonly string[]
}

/** What taking a join gives its new joiner (joinTaken). */
export interface JoinTaken {
  /** Blobs a joiner whose lease lapsed left (its files, or parts it had yet to remove): remove them. */
  left: string[]
  /** Whether the batch is to be joined (else only `left` is to be removed). */
  join: boolean
  /** The blobs the lease row lists from now on: `left`, then the new joiner's own files. */
  blobs: string[]
}

/**
 * docs/api.md §16: whether a joiner may take the join of a batch now, given its lease row (null:
 * none) and whether the batch is ready to join (in progress, every request in a done shard): when no
 * lease runs (none, or one lapsed at `now`), and there is a batch to join or a lapsed joiner's blobs
 * to remove. Null otherwise (another joiner holds it, or there is nothing to do).
 */
export function joinTaken(
  lease: JoinLease | null,
  ready: boolean,
  files: readonly string[],
  now: number,
): JoinTaken | null {
  if (lease && lease.lease_until > now) return null
  const left = [...(lease?.blobs ?? [])]
  if (!ready && left.length === 0 && !lease) return null
  return { left, join: ready, blobs: ready ? [...left, ...files] : left }
}
