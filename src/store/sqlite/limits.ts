import type { RateLimiter } from '../../lib/rate-limit'
import type { LimitsStore } from '../limits'

/** One process serves the lab: the counters live in its memory, bounded (src/lib/rate-limit.ts). */
export function sqliteLimits(limiter: RateLimiter): LimitsStore {
  return {
    async take(rule, key, limit, windowSeconds) {
      limiter.take(rule, key, limit, windowSeconds)
    },
  }
}
