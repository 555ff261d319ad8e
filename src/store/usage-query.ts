import { type SQL, type SQLWrapper, sql, type Table } from 'drizzle-orm'
import {
  DAY,
  type USAGE_TOKENS,
  type UsageGroup,
  type UsageScope,
  type UsageStore,
  type UsageSums,
} from './usage'

// The usage aggregate (docs/api.md §14) in the SQL both engines accept; each engine brings its tables
// and how it reads one token count out of batches.usage (json_extract, or jsonb ->>).

/** The columns the query names, from either engine's schema. */
export interface UsageTables {
  batches: Table &
    Record<
      | 'id'
      | 'user_id'
      | 'api_key_id'
      | 'model'
      | 'status'
      | 'completed_at'
      | 'request_counts_completed'
      | 'usage',
      SQLWrapper
    >
  batchAssignments: Table & Record<'batch_id' | 'org_id' | 'completed_at', SQLWrapper>
  batchShards: Table &
    Record<
      'batch_id' | 'org_id' | 'status' | 'completed_at' | 'request_counts_completed' | 'usage',
      SQLWrapper
    >
  apiKeys: Table & Record<'id' | 'prefix' | 'name', SQLWrapper>
  users: Table & Record<'id' | 'email', SQLWrapper>
}

/** What differs between the engines' statements. */
export interface UsageDialect {
  /** The sum of one token count over the group's `usage` (a usage JSON column), 0 when none has it. */
  tokenSum(usage: SQLWrapper, name: (typeof USAGE_TOKENS)[number]): SQL
  /** `status = 'completed'`, written so that it never leads the planner away from the range probe. */
  completed(status: SQLWrapper): SQL
}

/**
 * One statement: the scope's index range probe (batches (user_id, completed_at), batch_assignments
 * and batch_shards (org_id, completed_at), or batches (completed_at)), the completed batches in
 * it, summed per group.
 */
export function usageQuery(
  t: UsageTables,
  scope: UsageScope,
  range: { start: number; end: number },
  groupBy: UsageGroup,
  dialect: UsageDialect,
): SQL {
  const { batches: b, batchAssignments: a, batchShards: s, apiKeys: k, users: u } = t
  // The org's view counts the work its workers ran: a whole batch where its completing assignment
  // ran (its only one: a requeue deletes the assignment), completed at the batch's completion
  // time; and, of a split batch (docs/api.md §16), each shard its workers completed, with the
  // shard's own requests and usage. Either way only once the batch is completed.
  const org = scope.kind === 'org'
  const work = sql.raw('w')
  const completedAt = org ? sql`${work}.done_at` : b.completed_at
  const requests = org ? sql`${work}.requests` : b.request_counts_completed
  const usage = org ? sql`${work}.usage` : b.usage
  const owner = scope.kind === 'user' ? sql`${b.user_id} = ${scope.userId}` : sql`TRUE`
  const from = org
    ? sql`(SELECT ${a.batch_id} AS batch_id, ${a.completed_at} AS done_at,
             ${b.request_counts_completed} AS requests, ${b.usage} AS usage
           FROM ${a} JOIN ${b} ON ${b.id} = ${a.batch_id}
           WHERE ${a.org_id} = ${scope.orgId} AND ${a.completed_at} >= ${range.start}
             AND ${a.completed_at} < ${range.end}
           UNION ALL
           SELECT ${s.batch_id}, ${s.completed_at}, ${s.request_counts_completed}, ${s.usage}
           FROM ${s}
           WHERE ${s.org_id} = ${scope.orgId} AND ${s.status} = 'done' AND ${s.completed_at} >= ${range.start}
             AND ${s.completed_at} < ${range.end}) ${work}
         JOIN ${b} ON ${b.id} = ${work}.batch_id`
    : sql`${b}`
  const group = {
    day: sql`(${completedAt} / ${sql.raw(String(DAY))}) * ${sql.raw(String(DAY))}`,
    model: sql`${b.model}`,
    key: sql`${b.api_key_id}`,
    user: sql`${b.user_id}`,
  }[groupBy]
  const join =
    groupBy === 'key'
      ? sql`LEFT JOIN ${k} ON ${k.id} = ${b.api_key_id}`
      : groupBy === 'user'
        ? sql`LEFT JOIN ${u} ON ${u.id} = ${b.user_id}`
        : sql``
  const prefix = groupBy === 'key' ? sql`${k.prefix}` : sql`NULL`
  const name = groupBy === 'key' ? sql`${k.name}` : sql`NULL`
  const email = groupBy === 'user' ? sql`${u.email}` : sql`NULL`
  return sql`
    SELECT ${group} AS grp, ${prefix} AS prefix, ${name} AS name, ${email} AS email,
      count(DISTINCT ${b.id}) AS batches,
      coalesce(sum(${requests}), 0) AS requests,
      ${dialect.tokenSum(usage, 'prompt_tokens')} AS prompt_tokens,
      ${dialect.tokenSum(usage, 'cached_tokens')} AS cached_tokens,
      ${dialect.tokenSum(usage, 'completion_tokens')} AS completion_tokens,
      ${dialect.tokenSum(usage, 'total_tokens')} AS total_tokens
    FROM ${from} ${join}
    WHERE ${owner} AND ${completedAt} >= ${range.start} AND ${completedAt} < ${range.end}
      AND ${dialect.completed(b.status)}
    GROUP BY 1, 2, 3, 4`
}

/** A result row as either engine returns it (counts as numbers or numeric strings). */
export type UsageRaw = Record<'batches' | 'requests' | (typeof USAGE_TOKENS)[number], number | string> & {
  grp: string | number | null
  prefix: string | null
  name: string | null
  email: string | null
}

function toSums(r: UsageRaw, groupBy: UsageGroup): UsageSums {
  return {
    group: groupBy === 'day' ? Number(r.grp) : r.grp,
    label: { prefix: r.prefix, name: r.name, email: r.email },
    batches: Number(r.batches),
    requests: Number(r.requests),
    prompt_tokens: Number(r.prompt_tokens),
    cached_tokens: Number(r.cached_tokens),
    completion_tokens: Number(r.completion_tokens),
    total_tokens: Number(r.total_tokens),
  }
}

/** The usage store of either engine: its tables, its dialect, and how it reads a statement's rows. */
export function usageStore(
  tables: UsageTables,
  dialect: UsageDialect,
  rows: (query: SQL) => Promise<UsageRaw[]> | UsageRaw[],
): UsageStore {
  return {
    async sums(scope, range, groupBy) {
      const raw = await rows(usageQuery(tables, scope, range, groupBy, dialect))
      return raw.map((r) => toSums(r, groupBy))
    },
  }
}
