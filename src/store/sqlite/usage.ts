import { sql } from 'drizzle-orm'
import { apiKeys, batchAssignments, batches, batchShards, users } from '../../db/schema'
import type { UsageStore } from '../usage'
import { type UsageDialect, type UsageRaw, usageStore } from '../usage-query'
import type { SqliteDeps } from './deps'

// docs/api.md §14 usage sums on SQLite: usage columns are JSON text, read with json_extract.
export const sqliteDialect: UsageDialect = {
  tokenSum: (usage, name) => sql`coalesce(sum(json_extract(${usage}, ${`$.${name}`})), 0)`,
  // The unary + keeps SQLite from taking batches (status, model, seq) for the equality, which
  // would read every completed batch of the installation instead of the range.
  completed: (status) => sql`+${status} = 'completed'`,
}

export function sqliteUsage({ db }: Pick<SqliteDeps, 'db'>): UsageStore {
  const tables = { batches, batchAssignments, batchShards, apiKeys, users }
  return usageStore(tables, sqliteDialect, (query) => db.all<UsageRaw>(query))
}
