import type { Clock } from './clock'
import { rateLimited } from './errors'

/**
 * Sliding-window counters in memory (one process serves the whole lab). `take` throws the 429
 * AppError with Retry-After when `key` has used up `limit` hits in the last `windowSeconds`.
 * A limit of 0 turns the rule off (API.md §3).
 */
export class RateLimiter {
  private buckets = new Map<string, { windowMs: number; hits: number[] }>()
  constructor(private clock: Clock) {}

  take(key: string, limit: number, windowSeconds: number): void {
    if (limit <= 0) return
    const now = this.clock.nowMs()
    const windowMs = windowSeconds * 1000
    const bucket = this.buckets.get(key) ?? { windowMs, hits: [] }
    bucket.hits = bucket.hits.filter((t) => t > now - windowMs)
    this.buckets.set(key, bucket)
    if (bucket.hits.length >= limit) {
      throw rateLimited(Math.max(1, Math.ceil((bucket.hits[0]! + windowMs - now) / 1000)))
    }
    bucket.hits.push(now)
    if (this.buckets.size > 10_000) this.prune(now)
  }

  private prune(now: number) {
    for (const [k, b] of this.buckets) if (b.hits.every((t) => t <= now - b.windowMs)) this.buckets.delete(k)
  }
}
