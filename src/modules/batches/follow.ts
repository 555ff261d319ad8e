import type { BatchRow, BatchStatus } from '../../db/schema'
import type { Deps } from '../../deps'
import type { UserPrincipal } from '../../domain/principal'
import type { Viewer, Waiting } from '../../domain/waiting'
import { log } from '../../lib/logger'
import { readWaiting, viewerOf } from './waiting'

// docs/api.md §6 Events, `?follow=1`: the streams that stay open past validation until their batch
// is terminal. The database is the truth (ARCHITECTURE.md rule 15): one pass per server re-reads
// every followed batch at least every SSE_FOLLOW_SECONDS, the fleet and the queue once for all of
// them, and tells each stream what changed since it last sent — so a change made on another
// instance reaches a stream here within that bound, whether or not any signal arrived.

const TERMINAL: ReadonlySet<BatchStatus> = new Set(['completed', 'failed'])

export const isTerminal = (status: string) => TERMINAL.has(status as BatchStatus)

/** One stream in follow mode: its batch, its reader, and what it sent last. */
export interface Follower {
  batchId: string
  principal: UserPrincipal
  status: string
  waiting: Waiting | null
  send(event: 'status' | 'waiting', data: unknown): void
  close(): void
}

/** This server's follow-mode streams and the timer of their pass (made by src/compose.ts). */
export class BatchFollowers {
  readonly streams = new Set<Follower>()
  timer: ReturnType<typeof setInterval> | undefined
  passing = false
}

export interface FollowState {
  batchFollowers: BatchFollowers
}

/** Starts following; the returned function stops (the pass stops with the last stream). */
export function follow(deps: Deps & FollowState, f: Follower): () => void {
  const followers = deps.batchFollowers
  followers.streams.add(f)
  followers.timer ??= setInterval(() => {
    followPass(deps).catch((e) => log.warn('batch follow pass failed', { error: e }))
  }, deps.config.SSE_FOLLOW_SECONDS * 1000)
  return () => {
    followers.streams.delete(f)
    if (followers.streams.size === 0 && followers.timer) {
      clearInterval(followers.timer)
      followers.timer = undefined
    }
  }
}

const same = (a: Waiting | null, b: Waiting | null) => JSON.stringify(a) === JSON.stringify(b)

/** One pass: every followed batch re-read, each stream told its status and `waiting` when they changed. */
export async function followPass(deps: Deps & FollowState): Promise<void> {
  const followers = deps.batchFollowers
  // A slow pass is not overtaken by the next tick: the one after it reads afresh.
  if (followers.passing || followers.streams.size === 0) return
  followers.passing = true
  try {
    const streams = [...followers.streams]
    const ids = [...new Set(streams.map((s) => s.batchId))]
    const rows = (await Promise.all(ids.map((id) => deps.store.batches.get(id, null)))).filter(
      (r): r is BatchRow => r !== null,
    )
    const byId = new Map(rows.map((r) => [r.id, r]))
    const waitingOf = await readWaiting(deps, rows)
    const viewers = new Map<string, Promise<Viewer>>()
    const viewer = (p: UserPrincipal) => {
      let v = viewers.get(p.user.id)
      if (!v) {
        v = viewerOf(deps, p)
        viewers.set(p.user.id, v)
      }
      return v
    }
    for (const s of streams) {
      const row = byId.get(s.batchId)
      if (!row) {
        s.close() // gone with its owner
        continue
      }
      const waiting = row.status === 'validated' ? waitingOf(row, await viewer(s.principal)) : null
      if (!followers.streams.has(s)) continue // closed while the pass read
      if (row.status !== s.status) {
        s.status = row.status
        s.send('status', { batch_id: row.id, status: row.status })
      }
      if (!same(waiting, s.waiting)) {
        s.waiting = waiting
        s.send('waiting', { batch_id: row.id, waiting })
      }
      if (isTerminal(row.status)) s.close()
    }
  } finally {
    followers.passing = false
  }
}
