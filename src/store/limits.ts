// Rate limits (docs/api.md §3): sliding windows of hits per rule and key. The limits themselves (which
// rule, what key, how many, how long) are the services'; the counters live in the engine so that
// several instances share them (docs/api.md §12).

export interface LimitsStore {
  /**
   * Counts one hit of `key` under `rule`, or, when it already had `limit` hits in the last
   * `windowSeconds`, counts nothing and throws the 429 `rate_limit_exceeded` with Retry-After.
   * A limit of 0 turns the rule off.
   */
  take(rule: string, key: string, limit: number, windowSeconds: number): Promise<void>
}
