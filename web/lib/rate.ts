// Throughput and time left of a running batch (docs/api.md §16 dashboard), from what the page itself
// saw: successive samples of `request_counts` at the browser's clock. Pure, so it is tested alone.

/** Requests done (completed + failed) at `at` milliseconds of the browser's clock. */
export interface Sample {
  at: number
  done: number
}

/** How far back "recent" reaches: the rate follows the last half-minute, not the whole run. */
export const RATE_WINDOW_MS = 30_000

/**
 * Adds `next` to `samples`, keeping only the recent window (and the newest sample before it, so a
 * slow stretch still has a start). Counts that go down (a shard requeued) start over from `next`.
 */
export function addSample(samples: readonly Sample[], next: Sample, windowMs = RATE_WINDOW_MS): Sample[] {
  const last = samples[samples.length - 1]
  if (last && (next.done < last.done || next.at < last.at)) return [next]
  if (last && last.at === next.at) return [...samples.slice(0, -1), next]
  const all = [...samples, next]
  const from = all.findIndex((s) => s.at >= next.at - windowMs)
  return all.slice(Math.max(0, from - 1))
}

/** Requests per second over the samples kept; null until two samples a moment apart exist. */
export function rateOf(samples: readonly Sample[]): number | null {
  const first = samples[0]
  const last = samples[samples.length - 1]
  if (!first || !last || last.at - first.at < 500) return null
  return ((last.done - first.done) * 1000) / (last.at - first.at)
}

/** Seconds until `remaining` requests are done at `rate`; null when that cannot be said. */
export function timeLeft(remaining: number, rate: number | null): number | null {
  if (remaining <= 0) return 0
  if (rate === null || rate <= 0) return null
  return remaining / rate
}

/** The average rate of a finished run, from the server's own stamps (unix seconds). */
export function averageRate(done: number, startedAt: number | null, endedAt: number | null): number | null {
  if (startedAt === null || endedAt === null || endedAt <= startedAt) return null
  return done / (endedAt - startedAt)
}

/** 0.25 → "0.25 req/s", 3.16 → "3.2 req/s", 1234.5 → "1,235 req/s"; null → "—". */
export function formatRate(rate: number | null): string {
  if (rate === null) return '—'
  const digits = rate >= 100 ? 0 : rate >= 1 ? 1 : 2
  const [whole, fraction] = String(Number(rate.toFixed(digits))).split('.')
  const grouped = whole!.replace(/\B(?=(\d{3})+(?!\d))/g, ',')
  return `${fraction ? `${grouped}.${fraction}` : grouped} req/s`
}

/** 42 → "42 s", 125 → "2 min 5 s", 7260 → "2 h 1 min", 183600 → "2 d 3 h"; null → "—". */
export function formatDuration(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return '—'
  const s = Math.max(0, Math.ceil(seconds))
  if (s < 60) return `${s} s`
  if (s < 3600) return s % 60 ? `${Math.floor(s / 60)} min ${s % 60} s` : `${s / 60} min`
  const m = Math.floor(s / 60)
  if (s < 86400) return m % 60 ? `${Math.floor(m / 60)} h ${m % 60} min` : `${m / 60} h`
  const h = Math.floor(s / 3600)
  return h % 24 ? `${Math.floor(h / 24)} d ${h % 24} h` : `${h / 24} d`
}
