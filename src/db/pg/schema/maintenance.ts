import { bigint, index, pgTable, text } from 'drizzle-orm/pg-core'

// PostgreSQL only: maintenance passes run once per interval across every instance sharing the
// database (docs/api.md §12; pg-boss `trySetTimestamp`). SQLite has one process and needs no row.
export const maintenanceRuns = pgTable('maintenance_runs', {
  name: text().primaryKey(),
  last_run_at: bigint({ mode: 'number' }).notNull(),
})

// PostgreSQL only: rate-limit hits shared by every instance (docs/api.md §12); SQLite's one process
// keeps them in memory (src/lib/rate-limit.ts).
export const rateLimitHits = pgTable(
  'rate_limit_hits',
  {
    rule: text().notNull(),
    key: text().notNull(),
    at: bigint({ mode: 'number' }).notNull(), // ms
  },
  (t) => [index('rate_limit_hits_key').on(t.rule, t.key, t.at), index('rate_limit_hits_at').on(t.rule, t.at)],
)
