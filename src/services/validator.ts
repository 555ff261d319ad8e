import type { BatchRow } from '../db/schema'
import type { Deps } from '../deps'
import { needsOf } from '../domain/capabilities'
import { PrefixOrder } from '../domain/prefix-order'
import type { BatchEventsState, ValidationErrorEvent } from '../lib/batch-events'
import { StreamedReads } from '../lib/blobs/random-reads'
import { Float64Column } from '../lib/columns'
import { grouped } from '../lib/grouped'
import { LineSplitter } from '../lib/lines'
import { log } from '../lib/logger'
import { type CheckResult, InputChecker, type LookupModel } from '../modules/batches/validation'
import { visibleEntriesOf } from '../modules/catalogue/service'
import type { CatalogueState } from '../modules/catalogue/view'
import type { PollState } from '../modules/workers/waiters'
import { batchClaimable } from '../modules/workers/waiters'
import type { FinishedValidation } from '../store/batches'

// Asynchronous batch validation (docs/api.md §6: validating → validated | failed; docs/api.md §6). Batches are
// validated many at a time (VALIDATION_CONCURRENCY) from an in-process queue that POST /v1/batches
// wakes through the event bus; at start every batch still `validating` (left by a crash or a
// restart) is queued again, so the database is the queue's source of truth and nothing is lost. A
// validation streams the file (memory does not grow with its size), always reads to the end
// (errors.total is exact), yields to the event loop every few milliseconds (the server keeps
// answering during a 200 MB file), and writes its outcome in one transaction at the end (shared
// with the runs that end with it): an interrupted run leaves no trace and is simply run again.

/** Ids of the batches this server is validating now: one validation of a batch at a time. */
export interface ValidatorState {
  validating: Set<string>
}

/** Progress events at most this often (docs/api.md §6). */
export const PROGRESS_INTERVAL_MS = 250
/** How long a validation lease lasts without renewal (several instances, docs/api.md §12). */
export const VALIDATION_LEASE_SECONDS = 60
/** Longest stretch of validation work between two yields to the event loop. */
const YIELD_AFTER_MS = 8
/**
 * Validations run at once, interleaved at their yields: a 200 MB file holds one of them while
 * small batches go on through the others. A small batch's run is mostly waiting (file opens and
 * reads, database round trips), so many run at once: with eight, a burst of creates at
 * concurrency 64 left the validator a step behind each event-loop turn and batches waited seconds
 * (bench/create-validate.ts: p50 1 s on SQLite; 150 ms with 64).
 */
export const VALIDATION_CONCURRENCY = 64

export interface ValidationOutcome {
  batch_id: string
  status: 'validated' | 'failed'
  errors_total: number
  request_lines: number
}

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve))

/**
 * Takes the `validating` batches among `batchIds` that no run here has, in one statement: the
 * returned batches are this process's to validate (validateLeased); the others are left alone.
 */
async function leaseBatches(
  deps: Deps & BatchEventsState & CatalogueState & PollState & ValidatorState,
  batchIds: string[],
): Promise<BatchRow[]> {
  const busy = deps.validating
  const ids = batchIds.filter((id) => !busy.has(id))
  for (const id of ids) busy.add(id)
  let leased: BatchRow[] = []
  try {
    const now = deps.clock.now()
    leased = await deps.store.batches.leaseValidations(
      ids,
      deps.instanceId,
      now,
      now + VALIDATION_LEASE_SECONDS,
    )
  } finally {
    const taken = new Set(leased.map((b) => b.id))
    for (const id of ids) if (!taken.has(id)) busy.delete(id)
  }
  return leased
}

/**
 * Validates one batch that is `validating`. Returns null when there is nothing to do (not
 * validating, already being validated) or when `signal` aborted the run (the batch then stays
 * `validating` and is validated again at the next start).
 */
export async function validateBatch(
  deps: Deps & BatchEventsState & CatalogueState & PollState & ValidatorState,
  batchId: string,
  signal?: AbortSignal,
): Promise<ValidationOutcome | null> {
  const [batch] = await leaseBatches(deps, [batchId])
  return batch ? validateLeased(deps, batch, { signal }) : null
}

type VisibleEntries = ReturnType<typeof visibleEntriesOf>
type Finish = (item: FinishedValidation) => Promise<BatchRow | null>

/** Writes one outcome by itself (the queue in start() groups them instead). */
const finishAlone =
  (deps: Deps & BatchEventsState & CatalogueState & PollState & ValidatorState): Finish =>
  async (item) =>
    (await deps.store.batches.finishValidations([item], deps.clock.now()))[0] ?? null

export interface InputRead {
  result: CheckResult
  /** The byte offset of every request line, when the batch may be split (docs/api.md §16). */
  lineOffsets: Float64Column | undefined
  /** The input's size in bytes. */
  bytes: number
  /** docs/api.md §6 "Execution order": position → request line; null for the file order. */
  order: Uint32Array | null
}

/**
 * Reads a batch's input file through the checker (docs/api.md §6), streaming it (memory does not
 * grow with its size), always to the end (errors.total is exact), yielding to the event loop every
 * few milliseconds. It tells `onProgress` at most every PROGRESS_INTERVAL_MS and publishes nothing
 * itself; a file that is missing or unreadable is a file error of the result. Null when `signal`
 * aborted the read.
 */
export async function readInput(
  deps: Pick<Deps, 'blobs' | 'clock' | 'config' | 'metrics'>,
  batch: Pick<BatchRow, 'id' | 'endpoint' | 'input_file_id'>,
  hooks: {
    signal?: AbortSignal
    lookupModel: LookupModel
    onStoredError: (e: ValidationErrorEvent) => void
    onProgress: (p: { lines_read: number; errors_total: number }) => void
  },
): Promise<InputRead | null> {
  const { signal } = hooks
  const batchId = batch.id
  const key = batch.input_file_id
  let reads: StreamedReads | undefined
  // docs/api.md §6 "Execution order" (PREFIX_ORDER): every request line's prompt is keyed.
  const prefixOrder = deps.config.PREFIX_ORDER ? new PrefixOrder() : undefined
  // docs/api.md §16: only a batch that may be split, or that runs in an order of its own, keeps its
  // request-line index.
  const lineOffsets = deps.config.SHARD_MAX_REQUESTS > 0 || prefixOrder ? new Float64Column() : undefined
  const checker = new InputChecker({
    lineOffsets,
    prefixOrder,
    endpoint: batch.endpoint,
    maxLineBytes: deps.config.MAX_LINE_BYTES,
    maxRequests: deps.config.MAX_REQUESTS_PER_BATCH,
    lookupModel: hooks.lookupModel,
    readBytes: (offset, length) => reads?.read(offset, length) ?? null,
    onStoredError: hooks.onStoredError,
  })
  const splitter = new LineSplitter(deps.config.MAX_LINE_BYTES, checker.check)
  let bytes = 0
  try {
    const input = await deps.blobs.read(key).catch((e) => {
      log.error('batch input could not be opened', { batch_id: batchId, error: e })
      return undefined
    })
    if (input === null) {
      checker.fileError('file_not_found', 'The input file is missing')
    } else if (input === undefined) {
      checker.fileError('file_unreadable', 'The input file could not be read')
    } else {
      reads = new StreamedReads(deps.blobs.localPath(key))
      let counted = 0
      let lastProgress = Number.NEGATIVE_INFINITY
      let lastYield = performance.now()
      try {
        for await (const chunk of input) {
          if (signal?.aborted) return null
          reads.append(chunk)
          splitter.push(chunk)
          bytes += chunk.length
          deps.metrics.validationLines.inc(splitter.lines - counted)
          counted = splitter.lines
          const now = deps.clock.nowMs()
          if (now - lastProgress >= PROGRESS_INTERVAL_MS) {
            lastProgress = now
            hooks.onProgress({ lines_read: splitter.lines, errors_total: checker.errorsTotal })
          }
          if (performance.now() - lastYield >= YIELD_AFTER_MS) {
            await yieldToEventLoop()
            lastYield = performance.now()
          }
        }
        if (signal?.aborted) return null
        splitter.end()
        deps.metrics.validationLines.inc(splitter.lines - counted)
      } catch (e) {
        log.error('batch input could not be read', { batch_id: batchId, error: e })
        checker.fileError('file_unreadable', 'The input file could not be read')
      }
    }
    const result = checker.finish()
    // The order is decided once the last line is in (docs/api.md §6), for a batch that passed.
    const order = result.errorsTotal === 0 ? (prefixOrder?.finish() ?? null) : null
    return { result, lineOffsets, bytes, order }
  } finally {
    reads?.close()
  }
}

/**
 * Validates a batch leaseBatches() took; releases it (deps.validating) at the end. `visible`: the
 * catalogue entries its owner may select, when the caller has read them already; `finish`: how the
 * outcome is written.
 */
async function validateLeased(
  deps: Deps & BatchEventsState & CatalogueState & PollState & ValidatorState,
  batch: BatchRow,
  run: { signal?: AbortSignal; visible?: VisibleEntries; finish?: Finish },
): Promise<ValidationOutcome | null> {
  const { signal, finish = finishAlone(deps) } = run
  const batchId = batch.id
  const busy = deps.validating
  const renew = () => {
    const now = deps.clock.now()
    return deps.store.batches.leaseValidations(
      [batchId],
      deps.instanceId,
      now,
      now + VALIDATION_LEASE_SECONDS,
    )
  }
  // Several instances: the lease is renewed while this run lasts; if this process dies, it
  // lapses and another instance validates the batch again from the start.
  const lease = setInterval(() => void renew().catch(() => {}), (VALIDATION_LEASE_SECONDS * 1000) / 3)
  const bus = deps.batchEvents
  bus.beginRun(batchId)
  let finished = false
  try {
    // The catalogue entries the owner may select, read once (the checker asks line by line).
    const visible = await (run.visible ?? visibleEntriesOf(deps, batch.user_id))
    const startedAt = deps.clock.nowMs()
    const read = await readInput(deps, batch, {
      signal,
      lookupModel: (id) => visible.get(id) ?? null,
      onStoredError: (data) => bus.publish(batchId, { event: 'error', data }),
      onProgress: (data) => {
        const e = { event: 'progress' as const, data }
        // docs/api.md §6 asks for progress at most every 250 ms: a run younger than that tells only this
        // process's streams, and the other instances (docs/api.md §12) hear of it from `done` — no
        // progress NOTIFY for a small batch.
        if (deps.clock.nowMs() - startedAt < PROGRESS_INTERVAL_MS) bus.deliver(batchId, e)
        else bus.publish(batchId, e)
      },
    })
    if (!read) return null
    const { result, lineOffsets, bytes, order } = read
    const passed = result.errorsTotal === 0
    // docs/api.md §16: the request-line index of a batch that may be split, or (docs/api.md §6) that
    // runs in an execution order other than the file's.
    const indexed =
      passed &&
      (order !== null ||
        (deps.config.SHARD_MAX_REQUESTS > 0 && result.requestLines > 2 * deps.config.SHARD_MIN_REQUESTS))
    const moved = await finish({
      batchId,
      result: {
        passed,
        model: result.model,
        needs: result.needs,
        request_lines: result.requestLines,
        errors_total: result.errorsTotal,
        errors: result.errors,
        line_offsets: indexed ? lineOffsets : null,
        line_order: indexed && order ? { order, bytes } : null,
      },
    })
    const final = moved ?? (await deps.store.batches.get(batchId, null))
    finished = true
    if (final) {
      bus.publish(batchId, {
        event: 'done',
        data: {
          batch_id: batchId,
          status: final.status,
          request_counts: {
            total: final.request_counts_total,
            completed: final.request_counts_completed,
            failed: final.request_counts_failed,
          },
          errors_total: final.errors_total,
        },
      })
    }
    if (!moved) return null
    // docs/api.md §7 wait_seconds: a newly validated batch wakes the held polls.
    if (passed) {
      // docs/api.md §7 placement: its requests count in this server's figures at once.
      if (moved.model !== null) deps.placement.validated(moved.model, moved.request_counts_total)
      batchClaimable(deps, batchId, moved.model, needsOf(moved.needs))
    }
    log.info('batch validated', {
      batch_id: batchId,
      status: moved.status,
      request_lines: result.requestLines,
      errors_total: result.errorsTotal,
    })
    return {
      batch_id: batchId,
      status: passed ? 'validated' : 'failed',
      errors_total: result.errorsTotal,
      request_lines: result.requestLines,
    }
  } finally {
    if (!finished) bus.abandonRun(batchId)
    clearInterval(lease)
    busy.delete(batchId)
  }
}

/** One pass: validates every batch currently `validating`, oldest first. */
export async function runOnce(
  deps: Deps & BatchEventsState & CatalogueState & PollState & ValidatorState,
  signal?: AbortSignal,
): Promise<ValidationOutcome[]> {
  const outcomes: ValidationOutcome[] = []
  for (const id of await deps.store.batches.validatingIds()) {
    if (signal?.aborted) break
    const outcome = await validateBatch(deps, id, signal)
    if (outcome) outcomes.push(outcome)
  }
  return outcomes
}

/**
 * Starts the queue: first every batch left `validating`, then each new batch as it is created.
 * Returns stop(), which aborts the running validation (its batch stays `validating`) and
 * resolves once the loop has ended. Shutdown (deps.shutdown) stops it too.
 */
export function start(
  deps: Deps & BatchEventsState & CatalogueState & PollState & ValidatorState,
): () => Promise<void> {
  const stopping = new AbortController()
  const queue: string[] = []
  const queued = new Set<string>()
  const idle: (() => void)[] = []
  const wake = () => {
    for (const resume of idle.splice(0)) resume()
  }
  const enqueue = (id: string) => {
    if (queued.has(id)) return
    queued.add(id)
    queue.push(id)
    wake()
  }
  const stopListening = deps.batchEvents.onCreated(enqueue)
  stopping.signal.addEventListener('abort', wake, { once: true })
  const onShutdown = () => stopping.abort()
  deps.shutdown.signal.addEventListener('abort', onShutdown, { once: true })
  const recover = deps.store.batches.validatingIds().then((recovered) => {
    if (recovered.length)
      log.info('validator: revalidating batches left validating', { count: recovered.length })
    for (const id of recovered) enqueue(id)
  })
  // Batches whose validator died elsewhere (several instances): once a lease could have lapsed,
  // look again; a batch another live instance holds is refused by its lease and skipped.
  const rescan = setInterval(() => {
    deps.store.batches
      .validatingIds()
      .then((ids) => {
        for (const id of ids) enqueue(id)
      })
      .catch((e) => log.warn('validator: rescan failed', { error: e }))
  }, VALIDATION_LEASE_SECONDS * 1000)

  // Up to VALIDATION_CONCURRENCY runs read at once; the queued batches that fill the free places
  // are leased together in one statement (PostgreSQL: one round trip for several small batches).
  // A run frees its place when it hands its outcome to the writer, so the next batches are read
  // while the last ones' outcomes are written; outcomes that arrive together are written in one
  // transaction (PostgreSQL: one BEGIN and COMMIT for many small batches instead of one each).
  const runs = new Set<Promise<unknown>>()
  let reading = 0
  const finish = grouped<FinishedValidation, BatchRow | null>(
    (items) => deps.store.batches.finishValidations(items, deps.clock.now()),
    VALIDATION_CONCURRENCY,
  )
  const run = async () => {
    while (!stopping.signal.aborted) {
      const free = VALIDATION_CONCURRENCY - reading
      if (queue.length === 0 || free === 0) {
        await new Promise<void>((resolve) => idle.push(resolve))
        continue
      }
      const ids = queue.splice(0, free)
      for (const id of ids) queued.delete(id)
      let leased: BatchRow[] = []
      try {
        leased = await leaseBatches(deps, ids)
      } catch (e) {
        log.error('validator: could not lease batches', { batch_ids: ids, error: e })
      }
      // One owner's batches leased together share one read of what the owner may select.
      const visible = new Map<string, VisibleEntries>()
      for (const batch of leased) {
        let entries = visible.get(batch.user_id)
        if (!entries) {
          entries = visibleEntriesOf(deps, batch.user_id)
          entries.catch(() => {})
          visible.set(batch.user_id, entries)
        }
        reading++
        let released = false
        const release = () => {
          if (released) return
          released = true
          reading--
          wake()
        }
        const one = validateLeased(deps, batch, {
          signal: stopping.signal,
          visible: entries,
          finish: (item) => {
            release()
            return finish(item)
          },
        })
          .catch((e) => log.error('validation failed unexpectedly', { batch_id: batch.id, error: e }))
          .finally(() => {
            release()
            runs.delete(one)
          })
        runs.add(one)
      }
      // Let I/O in between: a backlog (e.g. recovered at start) of batches that resolve without
      // touching the event loop would otherwise hold off every request until it is done.
      await new Promise<void>((resolve) => setImmediate(resolve))
    }
  }
  const loop = (async () => {
    await recover.catch((e) => log.error('validator: could not list batches left validating', { error: e }))
    await run()
    await Promise.all(runs)
  })()

  return async () => {
    stopping.abort()
    clearInterval(rescan)
    stopListening()
    deps.shutdown.signal.removeEventListener('abort', onShutdown)
    await loop
  }
}
