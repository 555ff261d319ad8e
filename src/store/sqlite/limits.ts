import type { Clock } from '../../lib/clock'
import { RateLimiter } from '../../lib/rate-limit'
import type { LimitsStore } from '../limits'

/** One process serves the lab: the counters live in its memory, bounded (src/lib/rate-limit.ts). */
export function sqliteLimits(clock: Clock): LimitsStore {
  const limiter = new RateLimiter(clock)
  return {
    async take(rule, key, limit, windowSeconds) {
      limiter.take(rule, key, limit, windowSeconds)
    },
  }
}
