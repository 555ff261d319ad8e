import type { Treaty } from '@elysiajs/eden'
import type { ComponentChildren } from 'preact'
import { useEffect, useId, useRef, useState } from 'preact/hooks'
import { BATCH_ENDPOINTS, type BatchEndpoint } from '../../src/domain/batch-line'
import { ErrorNote, ListState, Pager, Section, Status } from '../components/ui'
import { ApiError, client, download, messageOf, ok, send } from '../lib/api'
import { formatCount, formatShare, formatTime } from '../lib/format'
import { usePaged, useResource } from '../lib/hooks'
import { checkFile, type FileCheck } from '../lib/jsonl-check'
import {
  addSample,
  averageRate,
  formatDuration,
  formatRate,
  rateOf,
  type Sample,
  timeLeft,
} from '../lib/rate'
import { navigate } from '../lib/router'
import { readEvents } from '../lib/sse'
import type { BatchObject, ShardObject } from '../lib/types'

const STATUSES = ['validating', 'validated', 'in_progress', 'completed', 'failed'] as const
type StatusFilter = (typeof STATUSES)[number]
const TERMINAL = new Set(['completed', 'failed'])

export function Batches() {
  const [status, setStatus] = useState<StatusFilter | ''>('')
  const [creating, setCreating] = useState(false)
  const list = usePaged(
    (page, signal) =>
      ok(client.v1.batches.get({ query: status ? { ...page, status } : page, fetch: { signal } })),
    `batches ${status}`,
    5000,
  )
  return (
    <Section
      title="Batches"
      actions={
        <button type="button" onClick={() => setCreating(!creating)} aria-expanded={creating}>
          New batch
        </button>
      }
    >
      {creating ? <NewBatch /> : null}
      <label class="inline">
        Status{' '}
        <select value={status} onChange={(e) => setStatus(e.currentTarget.value as StatusFilter | '')}>
          <option value="">all</option>
          {STATUSES.map((s) => (
            <option key={s} value={s}>
              {s.replace('_', ' ')}
            </option>
          ))}
        </select>
      </label>
      <ListState res={list} empty="No batch yet. Create one with “New batch”." />
      {list.data?.data.length ? (
        <table>
          <thead>
            <tr>
              <th>Batch</th>
              <th>Model</th>
              <th>Status</th>
              <th>Requests</th>
              <th>Created</th>
            </tr>
          </thead>
          <tbody>
            {list.data.data.map((b) => (
              <tr key={b.id}>
                <td>
                  <a href={`/app/batches/${b.id}`}>
                    <code>{b.id}</code>
                  </a>
                </td>
                <td>{b.model ?? '—'}</td>
                <td>
                  <Status value={b.status} />
                </td>
                <td>
                  {formatCount(b.request_counts.completed)}/{formatCount(b.request_counts.total)}
                </td>
                <td>{formatTime(b.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <Pager list={list} label="Batches" />
    </Section>
  )
}

function NewBatch() {
  const [file, setFile] = useState<File | null>(null)
  const [endpoint, setEndpoint] = useState<BatchEndpoint>(BATCH_ENDPOINTS[0])
  const [check, setCheck] = useState<FileCheck | null>(null)
  const [fileError, setFileError] = useState<string | null>(null)
  const [error, setError] = useState<unknown>(null)
  const [busy, setBusy] = useState(false)

  useEffect(() => {
    setCheck(null)
    setFileError(null)
    if (!file) return
    // docs/api.md §5: only .jsonl files are accepted; said here before any byte is sent.
    if (!file.name.toLowerCase().endsWith('.jsonl')) {
      setFileError('Choose a .jsonl file: one JSON request per line.')
      return
    }
    let current = true
    checkFile(file, endpoint).then(
      (c) => current && setCheck(c),
      (e) => current && setFileError(`The file cannot be read: ${messageOf(e)}`),
    )
    return () => {
      current = false
    }
  }, [file, endpoint])

  const submit = async (e: Event) => {
    e.preventDefault()
    if (!file) return setFileError('Choose a .jsonl file first.')
    if (fileError) return
    setBusy(true)
    setError(null)
    try {
      const form = new FormData()
      form.append('purpose', 'batch')
      form.append('file', file, file.name)
      // Sent as the browser streams it (Eden would read the whole file into memory first); the answer
      // is typed by the route all the same.
      const uploaded: Treaty.Data<typeof client.v1.files.post> = await (
        await send('POST', '/v1/files', { form })
      ).json()
      const batch = await ok(client.v1.batches.post({ input_file_id: uploaded.id, endpoint }))
      navigate(`/app/batches/${batch.id}`)
    } catch (err) {
      if (err instanceof ApiError && err.param === 'file') setFileError(err.message)
      else if (
        err instanceof ApiError &&
        (err.code === 'file_too_large' || err.code === 'invalid_file_type' || err.code === 'empty_file')
      )
        setFileError(err.message)
      else setError(err)
    } finally {
      setBusy(false)
    }
  }

  return (
    <form class="card" onSubmit={submit} aria-label="New batch">
      <ErrorNote error={error} />
      <div class="field">
        <label for="batch-file">JSONL file</label>
        <input
          id="batch-file"
          type="file"
          accept=".jsonl"
          aria-invalid={fileError ? true : undefined}
          aria-describedby="batch-file-note"
          onChange={(e) => setFile(e.currentTarget.files?.[0] ?? null)}
        />
        <div id="batch-file-note">
          {fileError ? (
            <p class="error" role="alert">
              {fileError}
            </p>
          ) : null}
          {check ? <CheckSummary check={check} /> : null}
        </div>
      </div>
      <div class="field">
        <label for="batch-endpoint">Endpoint</label>
        <select
          id="batch-endpoint"
          value={endpoint}
          onChange={(e) => setEndpoint(e.currentTarget.value as BatchEndpoint)}
        >
          {BATCH_ENDPOINTS.map((p) => (
            <option key={p} value={p}>
              {p}
            </option>
          ))}
        </select>
      </div>
      <button type="submit" disabled={busy || !file || !!fileError}>
        {busy ? 'Uploading…' : 'Create batch'}
      </button>
    </form>
  )
}

function CheckSummary({ check }: { check: FileCheck }) {
  return (
    <div class="check" role="status" aria-label="File check">
      <p>
        {formatCount(check.requests)} request line{check.requests === 1 ? '' : 's'}
        {check.partial ? ' in the first 8 MB' : ''}
        {check.model ? (
          <>
            , model <code>{check.model}</code>
          </>
        ) : null}
        .{' '}
        {check.problems.length
          ? 'The server will reject this file:'
          : 'No problem found; the server validates it again.'}
      </p>
      {check.problems.length ? (
        <ul class="problems">
          {check.problems.map((p) => (
            <li key={`${p.line}-${p.message}`}>
              {p.line === null ? p.message : `Line ${p.line}: ${p.message}`}
            </li>
          ))}
        </ul>
      ) : null}
    </div>
  )
}

interface Progress {
  lines_read: number
  errors_total: number
}

/** The batch, kept live: validation through the events stream, running batches by polling. */
function useLiveBatch(id: string) {
  const batch = useResource(
    (signal) => ok(client.v1.batches({ batch_id: id }).get({ fetch: { signal } })),
    id,
  )
  const [progress, setProgress] = useState<Progress | null>(null)
  const status = batch.data?.status
  const { reload } = batch

  // docs/api.md §6 Events: status, progress, error, done; the stream ends after done.
  useEffect(() => {
    if (status !== 'validating') return
    const abort = new AbortController()
    send('GET', `/v1/batches/${id}/events`, { signal: abort.signal })
      .then((res) =>
        readEvents(
          res.body!,
          (e) => {
            if (e.event === 'progress') setProgress(JSON.parse(e.data) as Progress)
            if (e.event === 'done') reload()
          },
          abort.signal,
        ),
      )
      .then(
        () => !abort.signal.aborted && reload(),
        () => !abort.signal.aborted && setTimeout(reload, 2000),
      )
    return () => abort.abort()
  }, [id, status, reload])

  // A validated or running batch changes through the workers: re-read it every 2 s until it ends.
  useEffect(() => {
    if (!status || status === 'validating' || TERMINAL.has(status)) return
    const timer = setInterval(reload, 2000)
    return () => clearInterval(timer)
  }, [status, reload])

  return { batch, progress }
}

export function BatchDetail({ id }: { id: string }) {
  const { batch, progress } = useLiveBatch(id)
  const pace = usePace(batch.data)
  const [downloadError, setDownloadError] = useState<unknown>(null)
  const b = batch.data
  if (!b) return batch.error ? <ErrorNote error={batch.error} /> : <p class="muted">Loading…</p>
  const save = (fileId: string, kind: string) => {
    setDownloadError(null)
    download(`/v1/files/${fileId}/content`, `${b.id}-${kind}.jsonl`).catch(setDownloadError)
  }
  return (
    <Section title={`Batch ${b.id}`}>
      <ErrorNote error={batch.error} />
      <dl class="facts">
        <dt>Status</dt>
        <dd aria-live="polite">
          <Status value={b.status} />
          {/* docs/api.md §6 `waiting`: why a validated batch has not started, in words. */}
          {b.waiting ? <span class="muted waiting">{b.waiting.message}</span> : null}
        </dd>
        <dt>Model</dt>
        <dd>{b.model ?? '—'}</dd>
        <dt>Endpoint</dt>
        <dd>{b.endpoint}</dd>
        <dt>Requests</dt>
        <dd aria-live="polite">
          {formatCount(b.request_counts.completed)} completed, {formatCount(b.request_counts.failed)} failed
          of {formatCount(b.request_counts.total)}
        </dd>
        {b.status === 'validating' ? null : (
          <>
            <dt>Done</dt>
            <dd>
              <span class="progress">
                <progress
                  aria-label="Requests done"
                  max={Math.max(1, b.request_counts.total)}
                  value={pace.done}
                />
                <span>
                  {formatCount(pace.done)} of {formatCount(b.request_counts.total)}
                  {b.request_counts.total
                    ? ` (${Math.floor((pace.done * 100) / b.request_counts.total)}%)`
                    : ''}
                </span>
              </span>
            </dd>
            <Figure label="Throughput">{formatRate(pace.rate)}</Figure>
            <Figure label="Time left">
              {b.status === 'completed' ? 'none, finished' : formatDuration(pace.left)}
            </Figure>
          </>
        )}
        {/* docs/api.md §6 `usage`: a completed batch's tokens, and how many of its prompt tokens the
            engines served from their cache. */}
        {b.usage ? (
          <>
            <dt>Tokens</dt>
            <dd>
              {formatCount(b.usage.input_tokens)} prompt, {formatCount(b.usage.output_tokens)} completion
            </dd>
            <Figure label="Prompt tokens from cache">
              {formatShare(b.usage.input_tokens_details.cached_tokens, b.usage.input_tokens)}
            </Figure>
          </>
        ) : null}
        {b.shards ? (
          <>
            <dt>Shards</dt>
            <dd>
              {formatCount(b.shards.running)} running, {formatCount(b.shards.done)} done,{' '}
              {formatCount(b.shards.waiting)} waiting
            </dd>
          </>
        ) : null}
        {b.status === 'validating' && progress ? (
          <>
            <dt>Validation</dt>
            <dd>
              {formatCount(progress.lines_read)} lines read, {formatCount(progress.errors_total)} error
              {progress.errors_total === 1 ? '' : 's'}
            </dd>
          </>
        ) : null}
        <dt>Attempts</dt>
        <dd>{b.attempts}</dd>
        <dt>Last error</dt>
        <dd>{b.error ?? '—'}</dd>
        <dt>Created</dt>
        <dd>{formatTime(b.created_at)}</dd>
        <dt>Completed</dt>
        <dd>{formatTime(b.completed_at)}</dd>
      </dl>
      <p class="actions">
        {b.output_file_id ? (
          <a
            href={`/v1/files/${b.output_file_id}/content`}
            download
            onClick={(e) => {
              e.preventDefault()
              save(b.output_file_id!, 'output')
            }}
          >
            Download output
          </a>
        ) : null}
        {b.error_file_id ? (
          <a
            href={`/v1/files/${b.error_file_id}/content`}
            download
            onClick={(e) => {
              e.preventDefault()
              save(b.error_file_id!, 'errors')
            }}
          >
            Download errors
          </a>
        ) : null}
      </p>
      <ErrorNote error={downloadError} />
      {b.shards ? <Shards batch={b} /> : null}
      {b.errors.total ? (
        <>
          <h3>
            Validation errors ({formatCount(b.errors.total)}
            {b.errors.total > b.errors.data.length ? `, the first ${b.errors.data.length} shown` : ''})
          </h3>
          <table aria-label="Validation errors">
            <thead>
              <tr>
                <th>Line</th>
                <th>Field</th>
                <th>Code</th>
                <th>Message</th>
              </tr>
            </thead>
            <tbody>
              {b.errors.data.map((e, i) => (
                <tr key={i}>
                  <td>{e.line ?? '—'}</td>
                  <td>{e.field ?? '—'}</td>
                  <td>
                    <code>{e.code}</code>
                  </td>
                  <td>{e.message}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      ) : null}
    </Section>
  )
}

/**
 * A figure the page works out, labelled by its term (`getByLabel` finds it). An `<output>`, but not
 * a live region: a rate that changes every 2 s is read when asked for, not announced each time.
 */
function Figure({ label, children }: { label: string; children: ComponentChildren }) {
  const id = useId()
  return (
    <>
      <dt>
        <label for={id}>{label}</label>
      </dt>
      <dd>
        <output id={id} aria-live="off">
          {children}
        </output>
      </dd>
    </>
  )
}

/**
 * Requests done, throughput and time left (docs/api.md §16 dashboard). While the batch runs, the rate
 * is the recent one the page saw itself (web/lib/rate.ts); a finished batch has its average.
 */
function usePace(b: BatchObject | undefined) {
  const [samples, setSamples] = useState<Sample[]>([])
  const done = b ? b.request_counts.completed + b.request_counts.failed : 0
  useEffect(() => {
    if (b?.status !== 'in_progress') return
    setSamples((kept) => addSample(kept, { at: performance.now(), done }))
  }, [b, done])
  if (!b) return { done, rate: null, left: null }
  if (b.status === 'in_progress') {
    const rate = rateOf(samples)
    return { done, rate, left: timeLeft(b.request_counts.total - done, rate) }
  }
  if (b.status === 'completed')
    return { done, rate: averageRate(done, b.in_progress_at, b.completed_at), left: 0 }
  return { done, rate: null, left: null }
}

/** A split batch's shards (docs/api.md §16), re-read each time the page re-reads the batch. */
function Shards({ batch }: { batch: BatchObject }) {
  // Pages of 100 shards, in shard order (docs/api.md §16).
  const shards = usePaged(
    (query, signal) => ok(client.v1.batches({ batch_id: batch.id }).shards.get({ query, fetch: { signal } })),
    batch.id,
    0,
    100,
  )
  const { reload } = shards
  const mounted = useRef(false)
  useEffect(() => {
    if (mounted.current) reload()
    mounted.current = true
  }, [batch, reload])
  const rows = shards.data?.data ?? []
  // Known when every shard is on this one page.
  const whole = shards.page === 1 && shards.data?.has_more === false
  const handedOut = rows.reduce((n, s) => n + s.requests, 0)
  const unclaimed = TERMINAL.has(batch.status) || !whole ? 0 : batch.request_counts.total - handedOut
  return (
    <>
      <h3>Shards</h3>
      <ErrorNote error={shards.error} />
      {rows.length ? (
        <table aria-label="Shards">
          <thead>
            <tr>
              <th>Shard</th>
              <th>Requests</th>
              <th>Status</th>
              <th>Worker</th>
              <th>Attempts</th>
            </tr>
          </thead>
          <tbody>
            {rows.map((s) => (
              <ShardRow key={s.id} shard={s} />
            ))}
          </tbody>
        </table>
      ) : shards.data ? (
        <p class="muted">No shard handed out yet.</p>
      ) : null}
      <Pager list={shards} label="Shards" />
      {shards.data && unclaimed > 0 ? (
        <p class="muted">
          {formatCount(unclaimed)} request{unclaimed === 1 ? '' : 's'} not handed out yet: the next shards go
          to the next workers that ask.
        </p>
      ) : null}
    </>
  )
}

function ShardRow({ shard: s }: { shard: ShardObject }) {
  const done = s.request_counts.completed + s.request_counts.failed
  return (
    <tr>
      <td>
        {s.index + 1}{' '}
        <small class="muted">
          (requests {formatCount(s.first_request + 1)}–{formatCount(s.first_request + s.requests)})
        </small>
      </td>
      <td class="num">
        {formatCount(done)}/{formatCount(s.requests)}
      </td>
      <td>
        <Status value={s.status} />
      </td>
      <td>
        {s.status === 'waiting' ? '—' : (s.worker_name ?? s.worker_id ?? '—')}
        {/* docs/api.md §16 backup copies: the second copy running, or the copy that finished first. */}
        {s.status === 'running' && s.backup_worker_id ? (
          <small class="muted"> + backup on {s.backup_worker_name ?? s.backup_worker_id}</small>
        ) : s.status === 'done' && s.backup_won ? (
          <small class="muted"> (backup copy, finished first)</small>
        ) : null}
      </td>
      <td class="num">{s.attempts}</td>
    </tr>
  )
}
