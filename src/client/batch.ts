import { statSync } from 'node:fs'
import { type Api, type Batch, type FileObject, Interrupted } from './api'
import {
  flag,
  listOption,
  metadataPairs,
  numberOption,
  type Parsed,
  positionals,
  type Spec,
  stringOption,
} from './args'
import { ClientError, EXIT, usageError } from './exit'
import {
  batchEvent,
  checkWritable,
  finish,
  followRun,
  followValidation,
  getBatch,
  progressLine,
  type ResultPaths,
  showValidationError,
  validationSummary,
} from './follow'
import { resultWriter } from './reorder'
import { multipartUpload } from './upload'
import {
  bar,
  formatBytes,
  formatCount,
  formatDuration,
  formatTime,
  RateMeter,
  timeLeft,
  type View,
} from './view'

// `gridkeep submit`, `wait`, `status` and `results`: a JSONL file to a batch and its results, with
// the batch object of docs/api.md §6 as the one source of what happens.

export interface Context {
  api: Api
  view: View
}

const RESULT_OPTIONS: Spec = {
  output: { value: true, short: 'o' },
  errors: { value: true },
  'input-order': {},
}
const WAIT_OPTIONS: Spec = { ...RESULT_OPTIONS, interval: { value: true } }

export const SUBMIT_SPEC: Spec = {
  ...WAIT_OPTIONS,
  endpoint: { value: true },
  metadata: { value: true, repeat: true },
  wait: {},
}
export const WAIT_SPEC = WAIT_OPTIONS
export const STATUS_SPEC: Spec = {}
export const RESULTS_SPEC: Spec = RESULT_OPTIONS

const paths = (p: Parsed): ResultPaths => ({
  output: stringOption(p, 'output'),
  errors: stringOption(p, 'errors'),
  inputOrder: flag(p, 'input-order'),
})
/**
 * The result paths of `submit` and `wait`, which write files only when asked: --input-order orders
 * the files -o and --errors write, so alone it is bad usage.
 */
function followedPaths(p: Parsed): ResultPaths {
  const r = paths(p)
  if (r.inputOrder && !r.output && !r.errors)
    throw usageError('--input-order orders the files -o and --errors write: give one of them')
  return r
}
const intervalMs = (p: Parsed) => numberOption(p, 'interval', 2, 0.1, 3600) * 1000

/** How to pick the batch up again after Ctrl-C, with the same result paths. */
function resumeCommand(batchId: string, r: ResultPaths): string {
  const quote = (s: string) => (/^[\w./@:+-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`)
  return [
    'gridkeep wait',
    batchId,
    ...(r.output ? ['-o', quote(r.output)] : []),
    ...(r.errors ? ['--errors', quote(r.errors)] : []),
    ...(r.inputOrder ? ['--input-order'] : []),
  ].join(' ')
}

/** Ctrl-C after the batch exists: it keeps running on the server; say how to come back to it. */
function interrupted(view: View, batchId: string, r: ResultPaths): number {
  const resume = resumeCommand(batchId, r)
  view.event('interrupted', { batch_id: batchId, resume })
  view.warn(`interrupted: batch ${batchId} keeps running on the server. Resume with: ${resume}`)
  return EXIT.interrupted
}

/** Uploads `path` to POST /v1/files with a byte progress bar; returns the file object. */
async function upload(ctx: Context, path: string): Promise<FileObject> {
  const { api, view } = ctx
  let size: number
  try {
    const stat = statSync(path)
    if (!stat.isFile()) throw new Error('not a regular file')
    size = stat.size
  } catch (e) {
    throw new ClientError(EXIT.invalid, `cannot read ${path}: ${(e as Error).message}`, { file: path })
  }
  const started = performance.now()
  const meter = new RateMeter(5_000)
  let shownPercent = -1
  let lastDraw = 0
  const report = (sent: number) => {
    const percent = size ? Math.floor((sent * 100) / size) : 100
    if (percent !== shownPercent) {
      shownPercent = percent
      view.event('upload', { file: path, bytes_sent: sent, bytes_total: size })
    }
    const now = performance.now()
    if (view.json || (now - lastDraw < 100 && sent < size)) return
    lastDraw = now
    const rate = meter.sample(sent, now)
    const eta = timeLeft(size - sent, rate)
    view.setLive(
      `uploading ${path}  ${bar(size ? sent / size : 1)} ${String(percent).padStart(3)}%  ` +
        `${formatBytes(sent)}/${formatBytes(size)}` +
        (rate === null ? '' : `  ${formatBytes(rate)}/s  ${formatDuration(eta)} left`),
    )
  }
  report(0)
  const body = multipartUpload(path, size, { purpose: 'batch' }, report)
  const file = await api.json<FileObject>('POST', '/v1/files', { raw: body, untimed: true })
  const seconds = (performance.now() - started) / 1000
  view.clearLive()
  view.event('uploaded', {
    file_id: file.id,
    filename: file.filename,
    bytes: file.bytes,
    seconds: Math.round(seconds * 1000) / 1000,
  })
  view.say(
    `uploaded ${path} as ${file.id} (${formatBytes(file.bytes)} in ${seconds.toFixed(1)} s, ${formatBytes(file.bytes / Math.max(seconds, 0.001))}/s)`,
  )
  return file
}

export async function submit(p: Parsed, ctx: Context): Promise<number> {
  const { api, view } = ctx
  const [path] = positionals(p, ['FILE'])
  const r = followedPaths(p)
  const wait = flag(p, 'wait') || !!r.output || !!r.errors
  checkWritable(r)
  const interval = intervalMs(p)
  const metadata = metadataPairs(listOption(p, 'metadata'))
  const endpoint = stringOption(p, 'endpoint')
  const started = performance.now()

  let file: FileObject
  try {
    file = await upload(ctx, path!)
  } catch (e) {
    if (e instanceof Interrupted) {
      view.event('interrupted', { batch_id: null, resume: null })
      view.warn('interrupted during the upload: nothing was submitted')
      return EXIT.interrupted
    }
    throw e
  }
  let batch: Batch
  try {
    batch = await api.json<Batch>('POST', '/v1/batches', {
      body: { input_file_id: file.id, ...(endpoint ? { endpoint } : {}), ...(metadata ? { metadata } : {}) },
    })
  } catch (e) {
    if (e instanceof Interrupted) {
      view.event('interrupted', { batch_id: null, file_id: file.id, resume: null })
      view.warn(
        `interrupted while the batch was being created: see 'gridkeep batches' (the file is ${file.id})`,
      )
      return EXIT.interrupted
    }
    // The upload stands: say which file it is, so that it need not be sent again.
    if (e instanceof ClientError)
      throw new ClientError(e.exitCode, `${e.message}; the uploaded file stays as ${file.id}`, {
        ...e.detail,
        file_id: file.id,
      })
    throw e
  }
  view.event('created', {
    batch_id: batch.id,
    status: batch.status,
    endpoint: batch.endpoint,
    input_file_id: file.id,
  })
  view.say(`created batch ${batch.id} (${batch.endpoint}); validating`)
  try {
    batch = await followValidation(api, view, batch.id)
    if (batch.status === 'failed') return await finish(api, view, batch, r, started)
    view.say(`validated: ${formatCount(batch.request_counts.total)} requests for ${batch.model}`)
    if (!wait) {
      batchEvent(view, batch, null, null)
      view.say(`follow it: gridkeep wait ${batch.id}`)
      return EXIT.ok
    }
    batch = await followRun(api, view, batch, interval)
    return await finish(api, view, batch, r, started)
  } catch (e) {
    if (e instanceof Interrupted) return interrupted(view, batch.id, r)
    throw e
  }
}

export async function wait(p: Parsed, ctx: Context): Promise<number> {
  const { api, view } = ctx
  const [batchId] = positionals(p, ['BATCH'])
  const r = followedPaths(p)
  checkWritable(r)
  const started = performance.now()
  try {
    let batch = await getBatch(api, batchId!)
    if (batch.status === 'validating') batch = await followValidation(api, view, batch.id)
    else if (batch.status === 'failed')
      for (const e of batch.errors.data) showValidationError(view, batch.id, e)
    batch = await followRun(api, view, batch, intervalMs(p))
    return await finish(api, view, batch, r, started)
  } catch (e) {
    if (e instanceof Interrupted) return interrupted(view, batchId!, r)
    throw e
  }
}

export async function status(p: Parsed, ctx: Context): Promise<number> {
  const { api, view } = ctx
  const [batchId] = positionals(p, ['BATCH'])
  const b = await getBatch(api, batchId!)
  if (view.json) {
    view.data(b)
    return EXIT.ok
  }
  const c = b.request_counts
  const rows: [string, string][] = [
    ['batch', b.id],
    ['status', b.status],
    ['model', b.model ?? '-'],
    ['endpoint', b.endpoint],
    [
      'requests',
      `${formatCount(c.total)} (${formatCount(c.completed)} succeeded, ${formatCount(c.failed)} failed)`,
    ],
  ]
  if (b.shards)
    rows.push([
      'shards',
      `${b.shards.total}: ${b.shards.waiting} waiting, ${b.shards.running} running, ${b.shards.done} done`,
    ])
  if (b.waiting) rows.push(['waiting', b.waiting.message])
  if (b.usage) rows.push(['tokens', tokensLine(b.usage)])
  rows.push(['attempts', String(b.attempts)])
  if (b.error) rows.push(['error', b.error])
  rows.push(['input file', b.input_file_id])
  if (b.output_file_id) rows.push(['output file', b.output_file_id])
  if (b.error_file_id) rows.push(['error file', b.error_file_id])
  rows.push(['created', formatTime(b.created_at)])
  if (b.completed_at) rows.push([b.status === 'failed' ? 'ended' : 'completed', formatTime(b.completed_at)])
  if (b.metadata) for (const [k, v] of Object.entries(b.metadata)) rows.push([`metadata ${k}`, v])
  const width = Math.max(...rows.map(([k]) => k.length)) + 2
  view.print(rows.map(([k, v]) => `${k.padEnd(width)}${v}`).join('\n'))
  if (b.errors.total > 0) {
    for (const e of b.errors.data) showValidationError(view, b.id, e)
    view.print(validationSummary(b) ?? `${formatCount(b.errors.total)} validation errors`)
  }
  if (!['completed', 'failed'].includes(b.status)) view.print(progressLine(b, null, null))
  return EXIT.ok
}

/** "1,500 prompt (76 % from cache), 30 completion": a completed batch's tokens (docs/api.md §6 `usage`). */
export function tokensLine(u: NonNullable<Batch['usage']>): string {
  const prompt = u.input_tokens
  const cached = u.input_tokens_details.cached_tokens
  const share = prompt > 0 ? ` (${Math.floor((cached * 100) / prompt)} % from cache)` : ''
  return `${formatCount(prompt)} prompt${share}, ${formatCount(u.output_tokens)} completion`
}

export async function results(p: Parsed, ctx: Context): Promise<number> {
  const { api, view } = ctx
  const [batchId] = positionals(p, ['BATCH'])
  const r = paths(p)
  checkWritable(r)
  const b = await getBatch(api, batchId!)
  if (b.status === 'failed') return finishFailed(ctx, b)
  if (b.status !== 'completed')
    throw new ClientError(
      EXIT.invalid,
      `batch ${b.id} is ${b.status}, not completed: wait for it with 'gridkeep wait ${b.id}'`,
      {
        batch_id: b.id,
        status: b.status,
      },
    )
  // Without -o the output is the command's answer, on stdout.
  const output = r.output ?? '-'
  const inputOrder = !!r.inputOrder
  const writer = await resultWriter(api, b, inputOrder)
  let bytes: number
  let errorBytes: number | null
  try {
    bytes = await writer.save(b.output_file_id, output)
    errorBytes = r.errors ? await writer.save(b.error_file_id, r.errors) : null
  } finally {
    writer.close()
  }
  if (output !== '-') {
    view.event('done', {
      batch_id: b.id,
      status: b.status,
      request_counts: b.request_counts,
      output,
      errors: r.errors ?? null,
      input_order: inputOrder,
    })
    view.say(`output written to ${output} (${formatBytes(bytes)})`)
  }
  if (r.errors && r.errors !== '-')
    view.warn(`errors written to ${r.errors} (${formatBytes(errorBytes ?? 0)})`)
  return EXIT.ok
}

function finishFailed(ctx: Context, b: Batch): Promise<number> {
  for (const e of b.errors.data) showValidationError(ctx.view, b.id, e)
  return finish(ctx.api, ctx.view, b, {}, performance.now())
}
