// Usage (docs/api.md §14): tokens and requests of completed batches, summed within a time range. The
// rules (default and longest range, which grouping each caller may ask for, day buckets, how a
// key is named) live in src/modules/usage/service.ts; an engine only sums.

/** Whose work is summed. */
export type UsageScope =
  /** GET /v1/usage: the batches a user owns. */
  | { kind: 'user'; userId: string }
  /** GET /v1/orgs/{org_id}/usage: the batches an org's workers completed (the completing assignment). */
  | { kind: 'org'; orgId: string }
  /** GET /v1/admin/usage: every batch. */
  | { kind: 'all' }

export type UsageGroup = 'day' | 'model' | 'key' | 'user'

/** A UTC day in Unix seconds (Unix time counts no leap seconds): day buckets start at multiples. */
export const DAY = 86_400

/**
 * The token counts usage reports (docs/api.md §7 upload-results `usage`: the output lines' sums;
 * `cached_tokens` the prompt tokens the engines served from their cache, src/domain/usage.ts).
 */
export const USAGE_TOKENS = ['prompt_tokens', 'cached_tokens', 'completion_tokens', 'total_tokens'] as const

/** One group's sums. */
export interface UsageSums {
  /**
   * What the group is: the UTC day's start (unix seconds) for `day`, the model for `model`, the
   * batch's api_key_id for `key` (null: created with a JWT), the owner's id for `user`.
   */
  group: string | number | null
  /** `key`: the key's prefix and name, null when no key row has that id. `user`: the owner's email. */
  label: { prefix: string | null; name: string | null; email: string | null }
  batches: number
  /** Completed requests (request_counts.completed). */
  requests: number
  prompt_tokens: number
  /** Of the prompt tokens, those served from the engine's cache (0 where none was reported). */
  cached_tokens: number
  completion_tokens: number
  total_tokens: number
}

export interface UsageStore {
  /**
   * The completed batches of `scope` whose completion time is in [start, end), summed per group.
   * One index range probe per scope (batches (user_id, completed_at), batch_assignments
   * (org_id, completed_at), batches (completed_at)): never the whole installation's batches.
   * Groups with no batch are absent.
   */
  sums(scope: UsageScope, range: { start: number; end: number }, groupBy: UsageGroup): Promise<UsageSums[]>
}
