import type { Deps } from '../../deps'
import type { UserPrincipal } from '../../domain/principal'
import { badRequest } from '../../lib/errors'
import { DAY, type UsageGroup, type UsageScope, type UsageSums } from '../../store/usage'
import { requireOrgRole } from '../orgs/access'
import type { UsageBucket, UsageList, UsageQuery } from './model'

// Usage (docs/api.md §14): tokens and requests of completed batches, for the caller, for an org's
// owners and admins (the work its workers ran), for a superadmin (everyone). The rules live here;
// the store sums (src/store/usage.ts).
//
// - Times are Unix seconds; a range is [start, end). By default it is the 30 UTC days ending with
//   the current one; it may span at most 366 days (a year of day rows, leap day included).
// - group_by=day gives one row per UTC day that the range touches, days without work included,
//   each clipped to the range; model, key and user give one row per group that has work, the
//   most tokens first.
// - group_by=key names the key that created the batch by its prefix; batches created with a JWT
//   show as "dashboard". A revoked key keeps its row and so its prefix; a key whose row is gone
//   shows as "deleted".

export const DEFAULT_RANGE_DAYS = 30
export const MAX_RANGE_DAYS = 366
// 9999-12-31T23:59:59Z: a bound that keeps every time an exact integer in both engines.
const MAX_TIME = 253_402_300_799

/** Which groupings each view offers. An org's view never names another user's keys or account. */
export const GROUPS: Record<UsageScope['kind'], readonly UsageGroup[]> = {
  user: ['day', 'model', 'key'],
  org: ['day', 'model'],
  all: ['day', 'model', 'key', 'user'],
}

export const JWT_KEY_PREFIX = 'dashboard'
export const DELETED_KEY_PREFIX = 'deleted'

function parseTime(raw: string | undefined, name: 'start' | 'end'): number | undefined {
  if (raw === undefined) return undefined
  const n = /^[0-9]{1,15}$/.test(raw) ? Number(raw) : Number.NaN
  if (!(n <= MAX_TIME)) {
    throw badRequest(
      'invalid_value',
      `Invalid query parameter '${name}': must be a time in Unix seconds, an integer from 0 to ${MAX_TIME}`,
      name,
    )
  }
  return n
}

export interface UsageRange {
  start: number
  end: number
  groupBy: UsageGroup
}

/** The range and grouping a query asks for, with the defaults; bad input is a 400 naming it. */
export function usageRange(query: UsageQuery, now: number, groups: readonly UsageGroup[]): UsageRange {
  const groupBy = (query.group_by ?? 'day') as UsageGroup
  if (!groups.includes(groupBy)) {
    throw badRequest(
      'invalid_value',
      `Invalid query parameter 'group_by': must be one of ${groups.join(', ')}`,
      'group_by',
    )
  }
  const end = parseTime(query.end, 'end') ?? Math.floor(now / DAY) * DAY + DAY
  const start = parseTime(query.start, 'start') ?? Math.max(0, end - DEFAULT_RANGE_DAYS * DAY)
  if (start >= end) throw badRequest('invalid_range', "'start' must be before 'end'", 'start')
  if (end - start > MAX_RANGE_DAYS * DAY) {
    throw badRequest(
      'range_too_long',
      `A usage range spans at most ${MAX_RANGE_DAYS} days (${MAX_RANGE_DAYS * DAY} seconds)`,
      'end',
    )
  }
  return { start, end, groupBy }
}

const ZERO = {
  batches: 0,
  requests: 0,
  prompt_tokens: 0,
  cached_tokens: 0,
  completion_tokens: 0,
  total_tokens: 0,
}
const counts = (s: UsageSums) => ({
  batches: s.batches,
  requests: s.requests,
  prompt_tokens: s.prompt_tokens,
  cached_tokens: s.cached_tokens,
  completion_tokens: s.completion_tokens,
  total_tokens: s.total_tokens,
})

function groupFields(s: UsageSums, groupBy: Exclude<UsageGroup, 'day'>): Partial<UsageBucket> {
  if (groupBy === 'model') return { model: s.group as string | null }
  if (groupBy === 'user') return { user_id: s.group as string, email: s.label.email }
  if (s.group === null) return { key_prefix: JWT_KEY_PREFIX, key_id: null, key_name: null }
  return {
    key_prefix: s.label.prefix ?? DELETED_KEY_PREFIX,
    key_id: s.group as string,
    key_name: s.label.name,
  }
}

/** The usage of `scope` as the API lists it. */
export async function usage(deps: Deps, scope: UsageScope, query: UsageQuery): Promise<UsageList> {
  const { start, end, groupBy } = usageRange(query, deps.clock.now(), GROUPS[scope.kind])
  const sums = await deps.store.usage.sums(scope, { start, end }, groupBy)
  if (groupBy === 'day') {
    const byDay = new Map(sums.map((s) => [s.group as number, s]))
    const data: UsageBucket[] = []
    for (let day = Math.floor(start / DAY) * DAY; day < end; day += DAY) {
      const s = byDay.get(day)
      data.push({ start: Math.max(day, start), end: Math.min(day + DAY, end), ...(s ? counts(s) : ZERO) })
    }
    return { object: 'list', data }
  }
  const data = sums
    .map((s): UsageBucket => ({ start, end, ...groupFields(s, groupBy), ...counts(s) }))
    .sort((x, y) => y.total_tokens - x.total_tokens || y.requests - x.requests)
  return { object: 'list', data }
}

/** GET /v1/usage: the caller's own batches. */
export const myUsage = (deps: Deps, principal: UserPrincipal, query: UsageQuery) =>
  usage(deps, { kind: 'user', userId: principal.user.id }, query)

/** GET /v1/orgs/{org_id}/usage: owners and admins (docs/api.md §3 access: a non-member gets 404). */
export async function orgUsage(deps: Deps, principal: UserPrincipal, orgId: string, query: UsageQuery) {
  await requireOrgRole(deps, principal, orgId, 'admin')
  return usage(deps, { kind: 'org', orgId }, query)
}

/** GET /v1/admin/usage: every user's batches (superadmin). */
export const allUsage = (deps: Deps, query: UsageQuery) => usage(deps, { kind: 'all' }, query)
