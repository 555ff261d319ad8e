import { accessSync, constants } from 'node:fs'
import { dirname, resolve } from 'node:path'
import type { ValidationErrorEvent } from '../lib/batch-events'
import { SseParser } from '../lib/sse'
import { type Api, type Batch, pause } from './api'
import { readBody } from './download'
import { ClientError, EXIT } from './exit'
import { resultWriter } from './reorder'
import { formatCount, formatDuration, formatRate, RateMeter, timeLeft, type View } from './view'

// Following a batch: its validation through the event stream (docs/api.md §6 Events), then its run
// by reading the batch object (request_counts and shards, docs/api.md §6 and §16) every interval,
// then its results onto disk. Shared by `submit`, `wait`, `status` and `results`.

const TERMINAL = new Set(['completed', 'failed'])
/** How long a run is followed through a server that went away or fails (a restart) before giving up. */
const RETRY_FOR_MS = 60_000

export const getBatch = (api: Api, id: string) =>
  api.json<Batch>('GET', `/v1/batches/${encodeURIComponent(id)}`)

export function formatValidationError(e: ValidationErrorEvent): string {
  return `  line ${e.line ?? '-'}  ${e.field ?? '-'}  ${e.code}  ${e.message}`
}

/** Prints a validation error: a line for a person, a `validation_error` event for a script. */
export function showValidationError(view: View, batchId: string, e: ValidationErrorEvent) {
  view.event('validation_error', {
    batch_id: batchId,
    line: e.line,
    field: e.field,
    code: e.code,
    message: e.message,
  })
  if (!view.json) view.say(formatValidationError(e))
}

/**
 * Follows validation on the event stream until `done`; returns the batch as it then is. Errors are
 * shown as they arrive, by line and field; a stream that ends early is made up for by reading the
 * batch, so nothing is missed.
 */
export async function followValidation(api: Api, view: View, batchId: string): Promise<Batch> {
  let shown = 0
  let done = false
  try {
    const res = await api.send('GET', `/v1/batches/${encodeURIComponent(batchId)}/events`, { untimed: true })
    const parser = new SseParser()
    const decoder = new TextDecoder()
    for await (const chunk of readBody(api, res)) {
      for (const e of parser.push(decoder.decode(chunk, { stream: true }))) {
        const data = parseEvent(e.data)
        if (e.event === 'progress') {
          view.event('validation', {
            batch_id: batchId,
            lines_read: data.lines_read,
            errors_total: data.errors_total,
          })
          view.setLive(
            `validating  ${formatCount(data.lines_read)} lines read${data.errors_total ? `, ${formatCount(data.errors_total)} errors` : ''}`,
          )
        } else if (e.event === 'error') {
          shown++
          showValidationError(view, batchId, data)
        } else if (e.event === 'done') done = true
      }
      if (done) break
    }
  } catch (e) {
    // A stream cut short (the server restarted) is no reason to give up: the batch says the rest.
    if (!(e instanceof ClientError) || e.exitCode !== EXIT.unreachable) throw e
  }
  view.clearLive()
  let batch = await getBatch(api, batchId)
  while (batch.status === 'validating') {
    await pause(1000, api.interrupt)
    batch = await getBatch(api, batchId)
  }
  // Connected after validation ended, the stream sent no errors; cut short, not all of them. The
  // batch holds the stored ones, in the order the stream sends them.
  for (const e of batch.errors.data.slice(shown)) showValidationError(view, batchId, e)
  return batch
}

function parseEvent(data: string): any {
  try {
    return JSON.parse(data)
  } catch {
    throw new ClientError(
      EXIT.server,
      `the event stream sent something that is not JSON: ${data.slice(0, 100)}`,
    )
  }
}

/** The validation verdict in words, or null when the batch passed. */
export function validationSummary(batch: Batch): string | null {
  const { total, data } = batch.errors
  if (batch.status !== 'failed' || total === 0) return null
  const noun = total === 1 ? 'error' : 'errors'
  const more =
    total > data.length
      ? ` (the first ${data.length} are stored and listed; ${formatCount(total)} in all)`
      : ''
  return `validation failed: ${formatCount(total)} ${noun}${more}`
}

/** `batch_x  in_progress  1,234/50,000 done  3 failed  215 req/s  3 min left  shards: 4 running, 12 done` */
export function progressLine(b: Batch, rate: number | null, eta: number | null): string {
  const c = b.request_counts
  const done = c.completed + c.failed
  const parts = [b.id, b.status]
  if (b.status === 'validated')
    parts.push(
      `${formatCount(c.total)} requests waiting${b.waiting ? `: ${b.waiting.message}` : ' for a worker'}`,
    )
  else if (b.status !== 'validating') {
    parts.push(`${formatCount(done)}/${formatCount(c.total)} done`)
    if (c.failed) parts.push(`${formatCount(c.failed)} failed`)
    if (b.status === 'in_progress')
      parts.push(
        rate === null ? 'measuring the rate' : `${formatRate(rate)} req/s  ${formatDuration(eta)} left`,
      )
  }
  // docs/api.md §16: shards are cut as workers claim them, so their total grows until the end.
  if (b.shards && b.status !== 'completed') {
    const waiting = b.shards.waiting ? `, ${b.shards.waiting} waiting` : ''
    parts.push(`shards: ${b.shards.running} running, ${b.shards.done} done${waiting}`)
  } else if (b.shards) parts.push(`${b.shards.total} shards`)
  if (b.attempts > 0 && !TERMINAL.has(b.status)) parts.push(`attempt ${b.attempts + 1}`)
  return parts.join('  ')
}

/** The `batch` JSON line: what a script follows while the batch runs. */
export function batchEvent(view: View, b: Batch, rate: number | null, eta: number | null) {
  view.event('batch', {
    batch_id: b.id,
    status: b.status,
    request_counts: b.request_counts,
    shards: b.shards,
    attempts: b.attempts,
    waiting: b.waiting ?? null,
    requests_per_second: rate === null ? null : Math.round(rate * 10) / 10,
    eta_seconds: eta === null ? null : Math.round(eta),
  })
}

/** Reads the batch until it is completed or failed: the live line, and a `batch` event per change. */
export async function followRun(api: Api, view: View, first: Batch, intervalMs: number): Promise<Batch> {
  const meter = new RateMeter()
  let batch = first
  let last = ''
  let failingSince: number | null = null
  for (;;) {
    const c = batch.request_counts
    const rate = batch.status === 'in_progress' ? meter.sample(c.completed + c.failed) : null
    const eta = batch.status === 'in_progress' ? timeLeft(c.total - c.completed - c.failed, rate) : null
    const key = JSON.stringify([batch.status, c, batch.shards, batch.attempts, batch.waiting?.reason])
    if (key !== last) {
      last = key
      batchEvent(view, batch, rate, eta)
    }
    view.setLive(progressLine(batch, rate, eta))
    if (TERMINAL.has(batch.status)) {
      view.keepLive()
      return batch
    }
    await pause(intervalMs, api.interrupt)
    try {
      batch = await getBatch(api, batch.id)
      failingSince = null
    } catch (e) {
      // A server restarting mid-run: keep asking for a while; the batch is safe on the server.
      const transient =
        e instanceof ClientError && (e.exitCode === EXIT.unreachable || e.exitCode === EXIT.server)
      if (!transient) throw e
      failingSince ??= performance.now()
      if (performance.now() - failingSince > RETRY_FOR_MS) throw e
      view.setLive(`${batch.id}  ${(e as Error).message}; asking again`)
    }
  }
}

export interface ResultPaths {
  output?: string
  errors?: string
  /** --input-order: the files written in the input's order (docs/api.md §6 "Output order"). */
  inputOrder?: boolean
}

/** Checked before anything is uploaded or waited for: finding out after an hour's wait is too late. */
export function checkWritable(paths: ResultPaths) {
  for (const path of [paths.output, paths.errors]) {
    if (!path || path === '-') continue
    try {
      accessSync(dirname(resolve(path)), constants.W_OK)
    } catch (e) {
      throw new ClientError(EXIT.usage, `cannot write ${path}: ${(e as Error).message}`)
    }
  }
}

/**
 * The end of a followed batch: for `completed`, the output (and error) file written where asked;
 * a `done` event; the exit code (0 completed, 1 failed after its attempts, 3 failed validation).
 */
export async function finish(
  api: Api,
  view: View,
  batch: Batch,
  paths: ResultPaths,
  startedMs: number,
): Promise<number> {
  const c = batch.request_counts
  if (batch.status === 'completed') {
    if (paths.output || paths.errors) {
      const writer = await resultWriter(api, batch, !!paths.inputOrder)
      try {
        if (paths.output) await writer.save(batch.output_file_id, paths.output)
        if (paths.errors) await writer.save(batch.error_file_id, paths.errors)
      } finally {
        writer.close()
      }
    }
    view.event('done', {
      batch_id: batch.id,
      status: batch.status,
      request_counts: c,
      output_file_id: batch.output_file_id,
      error_file_id: batch.error_file_id,
      output: paths.output ?? null,
      errors: paths.errors ?? null,
      input_order: !!paths.inputOrder,
    })
    const took = formatDuration((performance.now() - startedMs) / 1000)
    view.say(
      `completed: ${formatCount(c.total)} requests, ${formatCount(c.completed)} succeeded, ${formatCount(c.failed)} failed (followed for ${took})`,
    )
    if (paths.output && paths.output !== '-') view.say(`output written to ${paths.output}`)
    if (paths.errors && paths.errors !== '-') view.say(`errors written to ${paths.errors}`)
    if (!paths.output) view.say(`read the output: gridkeep results ${batch.id} -o results.jsonl`)
    if (c.failed > 0 && !paths.errors)
      view.say(`${formatCount(c.failed)} requests failed: gridkeep results ${batch.id} --errors errors.jsonl`)
    return EXIT.ok
  }
  view.event('done', {
    batch_id: batch.id,
    status: batch.status,
    request_counts: c,
    errors_total: batch.errors.total,
    attempts: batch.attempts,
    error: batch.error,
  })
  const summary = validationSummary(batch)
  if (summary) {
    view.warn(summary)
    return EXIT.invalid
  }
  view.warn(`failed (attempts: ${batch.attempts}): ${batch.error ?? 'no error recorded'}`)
  return EXIT.batchFailed
}
