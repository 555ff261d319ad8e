import type { BatchRow } from '../../db/schema'
import type { Deps } from '../../deps'
import type { UserPrincipal } from '../../domain/principal'
import type { BatchEvent, BatchEventsState } from '../../lib/batch-events'
import { AppError } from '../../lib/errors'
import { log } from '../../lib/logger'
import { SSE_HEADERS, sseComment, sseEvent } from '../../lib/sse'
import { visibleBatch } from './service'

// GET /v1/batches/{id}/events (docs/api.md §6): `status` first, then live `progress` (≤ 1 per 250 ms,
// throttled by the validator), one `error` per stored error, `done`, and the stream closes. A
// batch already past `validating` gets `status` and `done` at once. Everything a stream holds
// (bus listener, ping timer, shutdown listener, its slot in the per-user limit, the gauge) is
// released by one idempotent `release`, whichever way the stream ends: done, client disconnect,
// or server shutdown.

/** Open event streams of one user (tests check that closed streams give their slot back). */
/** Open batch event streams per user id (docs/api.md §6, MAX_SSE_STREAMS_PER_USER), per server. */
export interface EventStreamsState {
  eventStreams: Map<string, number>
}

export const openStreams = (deps: Deps & EventStreamsState & BatchEventsState, userId: string) =>
  deps.eventStreams.get(userId) ?? 0

const doneData = (b: BatchRow) => ({
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
  deps: Deps & EventStreamsState & BatchEventsState,
  principal: UserPrincipal,
  batchId: string,
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
  let ping: ReturnType<typeof setInterval> | undefined
  let onShutdown = () => {}
  const release = () => {
    if (released) return
    released = true
    unsubscribe()
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
      // The outcome as stored: every stored error, then `done` (docs/api.md §6), and the stream closes.
      const finishFromDatabase = async () => {
        const final = await deps.store.batches.get(batchId, null)
        const stored = (await deps.store.batches.errorsOf([batchId])).get(batchId) ?? []
        for (const e of stored) {
          send(sseEvent('error', { code: e.code, line: e.line, field: e.field, message: e.message }))
        }
        if (final) send(sseEvent('done', doneData(final)))
        close()
      }
      // Subscribe before reading the status: events published while the read is under way are held
      // back and sent after `status`, so none falls between the two and `status` stays first.
      let held: BatchEvent[] | null = []
      const deliver = (e: BatchEvent) => {
        send(sseEvent(e.event, e.data))
        if (e.event === 'done') close()
      }
      unsubscribe = deps.batchEvents.subscribe(batchId, (e: BatchEvent) => {
        if (held) held.push(e)
        else deliver(e)
      })
      const batch = await deps.store.batches.get(batchId, null)
      if (!batch) return close()
      send(sseEvent('status', { batch_id: batch.id, status: batch.status }))
      if (batch.status !== 'validating') {
        send(sseEvent('done', doneData(batch)))
        return close()
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
        return finishFromDatabase()
      } else {
        for (const e of early) deliver(e)
      }
      if (released) return
      ping = setInterval(() => {
        send(sseComment('ping'))
        // A validation that ended on another instance whose signal was lost (docs/api.md §12).
        if (!deps.batchEvents.liveRun(batchId)) {
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
    },
    cancel() {
      // The client went away.
      release()
    },
  })
  log.debug('batch event stream opened', { batch_id: batchId, user_id: userId })
  return new Response(stream, { headers: SSE_HEADERS })
}
