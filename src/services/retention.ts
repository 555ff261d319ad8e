import type { Deps } from '../deps'
import { SYSTEM_AUDIT } from '../domain/audit'
import { type Every, every } from '../lib/clock'
import { log } from '../lib/logger'
import { startInterval } from './interval'

// The retention pass (docs/api.md §15): files whose expires_at has come — an upload's expires_after,
// or FILE_RETENTION_DAYS after a batch finished for its output and error files — lose their
// record, then their bytes. A file that a batch which has not finished reads is left for the first
// pass after that batch finishes. Batches keep naming the ids of their files, as OpenAI's do.
// Audit entries older than AUDIT_RETENTION_DAYS go too (docs/api.md §17); each transaction that
// deletes files or entries writes its own audit entry, with the server as the actor.
// runOnce() is one pass (tests drive it with a manual clock); start() runs it every
// SWEEP_INTERVAL_SECONDS, once per interval across the instances sharing a database.

/** Records deleted per transaction (about 0.1 s of write lock on SQLite, bench/retention.ts). */
const CHUNK = 2000

export interface RetentionResult {
  /** The ids of the files deleted by this pass. */
  expired: string[]
  /** How many audit entries this pass deleted. */
  auditExpired: number
}

const DAY = 86_400

export async function runOnce(deps: Deps): Promise<RetentionResult> {
  const now = deps.clock.now()
  const expired: string[] = []
  for (;;) {
    const rows = await deps.store.files.expire(now, CHUNK, SYSTEM_AUDIT)
    for (const row of rows) {
      // The record is gone first: a crash here leaves bytes nobody can name, never a file whose
      // bytes are missing.
      await deps.blobs.remove(row.id).catch((e) =>
        log.warn('the bytes of an expired file could not be removed', {
          file_id: row.id,
          error: e instanceof Error ? e : String(e),
        }),
      )
      deps.metrics.filesExpired.inc({ purpose: row.purpose })
      expired.push(row.id)
    }
    if (rows.length < CHUNK) break
  }
  const auditExpired = await expireAudit(deps, now)
  if (expired.length || auditExpired)
    log.info('retention pass', { files_expired: expired.length, audit_expired: auditExpired })
  return { expired, auditExpired }
}

/** docs/api.md §17: entries older than AUDIT_RETENTION_DAYS (0: none ever expire). */
async function expireAudit(deps: Deps, now: number): Promise<number> {
  const days = deps.config.AUDIT_RETENTION_DAYS
  if (days === 0) return 0
  let total = 0
  for (;;) {
    const n = await deps.store.audit.expire(now - days * DAY, CHUNK, now, SYSTEM_AUDIT)
    total += n
    if (n < CHUNK) return total
  }
}

/** Runs runOnce every SWEEP_INTERVAL_SECONDS until stopped (or the server shuts down). */
export function start(deps: Deps, schedule: Every = every): () => void {
  const seconds = deps.config.SWEEP_INTERVAL_SECONDS
  return startInterval(
    deps,
    { name: 'retention', seconds, once: 'retention', pass: () => runOnce(deps) },
    schedule,
  )
}
