import { sql } from 'drizzle-orm'
import { apiKeys, batchAssignments, batches, batchShards, users } from '../../db/pg/schema'
import type { UsageStore } from '../usage'
import { type UsageDialect, type UsageRaw, usageStore } from '../usage-query'
import type { PgDb } from './db'

// docs/api.md §14 usage sums on PostgreSQL: usage columns are jsonb; their numbers are read as numeric.
export const postgresDialect: UsageDialect = {
  tokenSum: (usage, name) => sql`coalesce(sum((${usage} ->> ${name})::numeric), 0)`,
  completed: (status) => sql`${status} = 'completed'`,
}

export function postgresUsage(db: PgDb): UsageStore {
  const tables = { batches, batchAssignments, batchShards, apiKeys, users }
  return usageStore(tables, postgresDialect, async (query) => [
    ...((await db.execute(query)) as unknown as UsageRaw[]),
  ])
}
