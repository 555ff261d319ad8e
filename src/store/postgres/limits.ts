import { and, asc, eq, lte, sql } from 'drizzle-orm'
import { rateLimitHits } from '../../db/pg/schema'
import type { Clock } from '../../lib/clock'
import { rateLimited } from '../../lib/errors'
import type { LimitsStore } from '../limits'
import type { PgDb } from './db'

/**
 * Shared counters: one row per hit. A take locks its (rule, key) for the length of its transaction
 * (an advisory lock: no row may exist yet), forgets the rule's expired hits (so the table holds at
 * most the hits still inside a window: bounded by the limits, whatever clients send), counts and
 * records.
 */
export function postgresLimits(db: PgDb, clock: Clock): LimitsStore {
  return {
    async take(rule, key, limit, windowSeconds) {
      if (limit <= 0) return
      const now = clock.nowMs()
      const windowMs = windowSeconds * 1000
      const since = now - windowMs
      const retryIn = await db.transaction(async (tx) => {
        await tx.execute(sql`SELECT pg_advisory_xact_lock(hashtext(${rule}), hashtext(${key}))`)
        await tx.delete(rateLimitHits).where(and(eq(rateLimitHits.rule, rule), lte(rateLimitHits.at, since)))
        const hits = await tx
          .select({ at: rateLimitHits.at })
          .from(rateLimitHits)
          .where(and(eq(rateLimitHits.rule, rule), eq(rateLimitHits.key, key)))
          .orderBy(asc(rateLimitHits.at))
        if (hits.length >= limit) return hits[0]!.at + windowMs - now
        await tx.insert(rateLimitHits).values({ rule, key, at: now })
        return null
      })
      if (retryIn !== null) throw rateLimited(Math.max(1, Math.ceil(retryIn / 1000)))
    },
  }
}
