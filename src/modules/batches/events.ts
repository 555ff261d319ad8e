import type { BatchRow } from '../../db/schema'
import type { Deps } from '../../deps'
import type { UserPrincipal } from '../../domain/principal'
import type { BatchEvent, BatchEventsState } from '../../lib/batch-events'
import { AppError } from '../../lib/errors'
import { log } from '../../lib/logger'
import { SSE_HEADERS, sseComment, sseEvent } from '../../lib/sse'
import { type FollowState, follow, isTerminal } from './follow'
import { visibleBatch, waitingFor } from './service'

// GET /v1/batches/{id}/events (docs/api.md §6): `status` first, then live `progress` (≤ 1 per 250 ms,
// throttled by the validator), one `error` per stored error, `done` with the batch's `waiting` for
// the caller, and the stream closes — or, with `?follow=1`, stays open with `status` and `waiting`
// on each change until the batch is terminal (follow.ts). A batch already past `validating` gets
// `status` and `done` at once. Everything a stream holds (bus listener, ping timer, shutdown
// listener, follow registration, its slot in the per-user limit, the gauge) is released by one
// idempotent `release`, whichever way the stream ends: done, terminal, client disconnect, or
// server shutdown.

/** Open event streams of one user (tests check that closed streams give their slot back). */
/** Open batch event streams per user id (docs/api.md §6, MAX_SSE_STREAMS_PER_USER), per server. */
export interface EventStreamsState {
  eventStreams: Map<string, number>
}

export const openStreams = (deps: Deps & EventStreamsState & BatchEventsState, userId: string) =>
  deps.eventStreams.get(userId) ?? 0

type DoneData = Extract<BatchEvent, { event: 'done' }>['data']

const doneData = (b: BatchRow): DoneData => ({
  batch_id: b.id,
  status: b.status,
  request_counts: {
    total: b.request_counts_total,
    completed: b.request_counts_completed,
    failed: b.request_counts_failed,
  },
  errors_total: b.errors_total,
})

export async function openBatchEvents(
  deps: Deps & EventStreamsState & BatchEventsState & FollowState,
  principal: UserPrincipal,
  batchId: string,
  following = false,
): Promise<Response> {
  await visibleBatch(deps, principal, batchId)
  const userId = principal.user.id
  const open = deps.eventStreams
  const held = open.get(userId) ?? 0
  if (held >= deps.config.MAX_SSE_STREAMS_PER_USER) {
    throw new AppError(
      429,
      'too_many_streams',
      `At most ${deps.config.MAX_SSE_STREAMS_PER_USER} event streams may be open at once`,
      null,
      { 'retry-after': '5' },
    )
  }
  open.set(userId, held + 1)
  deps.metrics.sseStreamsOpen.inc()

  let released = false
  let unsubscribe = () => {}
  let unfollow = () => {}
  let ping: ReturnType<typeof setInterval> | undefined
  let onShutdown = () => {}
  const release = () => {
    if (released) return
    released = true
    unsubscribe()
    unfollow()
    clearInterval(ping)
    deps.shutdown.signal.removeEventListener('abort', onShutdown)
    const n = (open.get(userId) ?? 1) - 1
    if (n > 0) open.set(userId, n)
    else open.delete(userId)
    deps.metrics.sseStreamsOpen.dec()
  }

  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      const send = (bytes: Uint8Array) => {
        if (released) return
        try {
          controller.enqueue(bytes)
        } catch {
          release()
        }
      }
      const close = () => {
        if (released) return
        release()
        try {
          controller.close()
        } catch {}
      }
      // `done` with the batch's `waiting` as the caller reads it now (docs/api.md §6); then the
      // stream closes, or in follow mode goes on from what `done` said until the batch is terminal.
      let finished = false
      const finish = async (done: DoneData, read?: BatchRow) => {
        if (finished) return
        finished = true
        const row =
          done.status !== 'validated' ? null : (read ?? (await deps.store.batches.get(batchId, null)))
        const waiting = row ? (await waitingFor(deps, principal, [row]))(row) : null
        send(sseEvent('done', { ...done, waiting }))
        if (!following || isTerminal(done.status) || released) return close()
        unfollow = follow(deps, {
          batchId,
          principal,
          status: done.status,
          waiting,
          send: (event, data) => send(sseEvent(event, data)),
          close,
        })
      }
      const finishing = (done: DoneData) => {
        finish(done).catch((e) => {
          log.warn('batch event stream ended early', { batch_id: batchId, error: e })
          close()
        })
      }
      // The outcome as stored: every stored error, then `done` (docs/api.md §6).
      const finishFromDatabase = async () => {
        if (finished) return
        const final = await deps.store.batches.get(batchId, null)
        const stored = (await deps.store.batches.errorsOf([batchId])).get(batchId) ?? []
        if (finished) return // the bus's `done` got there while this read
        for (const e of stored) {
          send(sseEvent('error', { code: e.code, line: e.line, field: e.field, message: e.message }))
        }
        if (final) await finish(doneData(final), final)
        else close()
      }
      // Subscribe before reading the status: events published while the read is under way are held
      // back and sent after `status`, so none falls between the two and `status` stays first.
      let held: BatchEvent[] | null = []
      const deliver = (e: BatchEvent) => {
        if (e.event === 'done') finishing(e.data)
        else if (!finished) send(sseEvent(e.event, e.data))
      }
      unsubscribe = deps.batchEvents.subscribe(batchId, (e: BatchEvent) => {
        if (held) held.push(e)
        else deliver(e)
      })
      const batch = await deps.store.batches.get(batchId, null)
      if (!batch) return close()
      send(sseEvent('status', { batch_id: batch.id, status: batch.status }))
      const keepAlive = () => {
        if (released) return
        ping = setInterval(() => {
          send(sseComment('ping'))
          // A validation that ended on another instance whose signal was lost (docs/api.md §12).
          if (!finished && !deps.batchEvents.liveRun(batchId)) {
            deps.store.batches
              .get(batchId, null)
              .then((b) => {
                if (b && b.status !== 'validating' && !released) return finishFromDatabase()
              })
              .catch(() => {})
          }
        }, deps.config.SSE_PING_SECONDS * 1000)
        onShutdown = close
        if (deps.shutdown.signal.aborted) return close()
        deps.shutdown.signal.addEventListener('abort', onShutdown, { once: true })
      }
      if (batch.status !== 'validating') {
        held = null
        await finish(doneData(batch), batch)
        return keepAlive()
      }
      // A client joining half-way catches up on what the running validation has produced (the
      // run holds every error so far, those held back included).
      const run = deps.batchEvents.liveRun(batchId)
      const early = held
      held = null
      if (run) {
        send(sseEvent('progress', { lines_read: run.lines_read, errors_total: run.errors_total }))
        for (const error of run.errors) send(sseEvent('error', error))
        for (const e of early) if (e.event !== 'error') deliver(e)
      } else if (early.some((e) => e.event === 'done')) {
        // The validation ended while the status was read: its outcome is in the database.
        await finishFromDatabase()
        return keepAlive()
      } else {
        for (const e of early) deliver(e)
      }
      keepAlive()
    },
    cancel() {
      // The client went away.
      release()
    },
  })
  log.debug('batch event stream opened', { batch_id: batchId, user_id: userId })
  return new Response(stream, { headers: SSE_HEADERS })
}
