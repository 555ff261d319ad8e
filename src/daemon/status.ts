import { log, setLogSink } from '../lib/logger'
import type { JobView } from './job'

// The operator view. On a terminal: one live status line (job, done/total, requests/s, ETA — or,
// while a job waits for its model, what it waits on: `loading qwen (unloading llama: least recently
// used, no job needs it)`), with log records printed above it in a readable form. Otherwise
// (systemd, docker, a pipe): structured JSON log lines only, with a periodic `job progress` record
// carrying the same figures.

export interface JobRate {
  done: number
  total: number
  failed: number
  /** Requests per second over the last few seconds. */
  rps: number
  /** Seconds left at that rate, or null while unknown. */
  eta_seconds: number | null
}

const WINDOW_MS = 10_000

/** Tracks completion samples per job to give a recent rate and an ETA. */
export class RateMeter {
  private readonly samples = new Map<string, { t: number; done: number }[]>()

  sample(job: JobView, now = Date.now()): JobRate {
    const done = job.completed + job.failed
    const list = this.samples.get(job.job_id) ?? [{ t: job.started_at_ms, done: 0 }]
    list.push({ t: now, done })
    while (list.length > 2 && now - list[0]!.t > WINDOW_MS) list.shift()
    this.samples.set(job.job_id, list)
    const first = list[0]!
    const dt = (now - first.t) / 1000
    const rps = dt > 0 ? (done - first.done) / dt : 0
    const left = Math.max(0, job.total - done)
    return { done, total: job.total, failed: job.failed, rps, eta_seconds: rps > 0 ? left / rps : null }
  }

  forget(active: Set<string>) {
    for (const id of this.samples.keys()) if (!active.has(id)) this.samples.delete(id)
  }
}

export function formatDuration(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return '--:--'
  const s = Math.round(seconds)
  const h = Math.floor(s / 3600)
  const m = Math.floor((s % 3600) / 60)
  const sec = String(s % 60).padStart(2, '0')
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${sec}` : `${m}:${sec}`
}

/** `batch_x  1234/50000  3 failed  2150 req/s  ETA 0:22`, or `batch_x  loading qwen (…)` */
export function formatStatusLine(job: JobView, r: JobRate): string {
  if (job.stage) return `${job.job_id}  ${job.stage}`
  const failed = r.failed ? `  ${r.failed} failed` : ''
  return `${job.job_id}  ${r.done}/${r.total || '?'}${failed}  ${Math.round(r.rps)} req/s  ETA ${formatDuration(r.eta_seconds)}`
}

/** One JSON log record rendered for a person: `12:00:01 info  registered worker_id=wrk_…`. */
export function humanLogLine(line: string): string {
  try {
    const { ts, level, msg, ...fields } = JSON.parse(line)
    const time = typeof ts === 'string' ? ts.slice(11, 19) : ''
    const rest = Object.entries(fields)
      .filter(([k]) => k !== 'component')
      .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`)
      .join(' ')
    return `${time} ${String(level).padEnd(5)} ${msg}${rest ? ` ${rest}` : ''}`
  } catch {
    return line
  }
}

export interface StatusSource {
  jobViews(): JobView[]
}

/** Starts the view; returns a function that stops it. */
export function startStatusView(
  source: StatusSource,
  opts: { tty: boolean; logEverySeconds: number; out?: { write(s: string): unknown } },
): () => void {
  const out = opts.out ?? process.stdout
  const meter = new RateMeter()
  if (!opts.tty) {
    const timer = setInterval(() => {
      const views = source.jobViews()
      meter.forget(new Set(views.map((v) => v.job_id)))
      for (const v of views) {
        const r = meter.sample(v)
        log.info('job progress', {
          job_id: v.job_id,
          done: r.done,
          total: r.total,
          failed: r.failed,
          requests_per_second: Math.round(r.rps * 10) / 10,
          eta_seconds: r.eta_seconds === null ? null : Math.round(r.eta_seconds),
          ...(v.stage ? { stage: v.stage } : {}),
        })
      }
    }, opts.logEverySeconds * 1000)
    return () => clearInterval(timer)
  }

  let status = ''
  const draw = () => out.write(`\r\x1b[K${status}`)
  const restore = setLogSink((line) => {
    out.write(`\r\x1b[K${humanLogLine(line)}\n`)
    draw()
  })
  const timer = setInterval(() => {
    const views = source.jobViews()
    meter.forget(new Set(views.map((v) => v.job_id)))
    status = views.length ? views.map((v) => formatStatusLine(v, meter.sample(v))).join('  |  ') : 'idle'
    draw()
  }, 1000)
  return () => {
    clearInterval(timer)
    restore()
    out.write('\r\x1b[K')
  }
}
