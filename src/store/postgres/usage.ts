import { sql } from 'drizzle-orm'
import { apiKeys, batchAssignments, batches, users } from '../../db/pg/schema'
import type { UsageStore } from '../usage'
import { toSums, type UsageDialect, type UsageRaw, usageQuery } from '../usage-query'
import type { PgDb } from './db'

// docs/api.md §14 usage sums on PostgreSQL: batches.usage is jsonb; its numbers are read as numeric.
export const postgresDialect: UsageDialect = {
  tokenSum: (name) => sql`coalesce(sum((${batches.usage} ->> ${name})::numeric), 0)`,
  completed: (status) => sql`${status} = 'completed'`,
}

export function postgresUsage(db: PgDb): UsageStore {
  return {
    async sums(scope, range, groupBy) {
      const query = usageQuery(
        { batches, batchAssignments, apiKeys, users },
        scope,
        range,
        groupBy,
        postgresDialect,
      )
      return [...((await db.execute(query)) as unknown as UsageRaw[])].map((r) => toSums(r, groupBy))
    },
  }
}
