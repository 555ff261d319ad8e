// Exponential backoff with full jitter (the AWS architecture blog's "full jitter"): the n-th wait is
// uniform in [0, min(max, base·2^n)], so a fleet retrying after a shared outage spreads out.

export interface Backoff {
  baseMs: number
  maxMs: number
}

export const backoffDelay = (attempt: number, b: Backoff, random = Math.random) =>
  Math.round(random() * Math.min(b.maxMs, b.baseMs * 2 ** attempt))

/** Resolves after `ms`, or early (without error) when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted || ms <= 0) return Promise.resolve()
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal?.addEventListener('abort', done, { once: true })
  })
}

/** Retry-After in seconds or as an HTTP date; null when absent or unreadable. */
export function retryAfterMs(header: string | null, now = Date.now()): number | null {
  if (!header) return null
  const secs = Number(header)
  if (Number.isFinite(secs)) return Math.max(0, secs * 1000)
  const at = Date.parse(header)
  return Number.isNaN(at) ? null : Math.max(0, at - now)
}
