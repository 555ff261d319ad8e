import {
  and,
  eq,
  gt,
  gte,
  inArray,
  isNotNull,
  isNull,
  lt,
  lte,
  or,
  type SQL,
  type SQLWrapper,
  sql,
} from 'drizzle-orm'
import type { BatchStatus, FileRow, UserRow } from '../db/schema'
import { changesRole, type UserChanges } from '../domain/admin-rules'
import type { AuditFilter } from '../domain/audit'
import { pick } from '../lib/pick'
import { CATALOGUE_COLUMNS } from './catalogue'
import type { KeyOwner } from './keys'
import type { AttemptResult } from './webhooks'

// Pieces of statements both engines write alike, named once: column sets, conditions and row
// changes. Each takes the engine's own tables (SQLite's or PostgreSQL's schema), so drizzle binds
// every value through that engine's column.

/** `names` maps each name a selection gives to the table's column it reads. */
type Selection<T, M extends Record<string, keyof T>> = { [K in keyof M]: T[M[K]] }

function select<T, const M extends Record<string, keyof T>>(table: T, names: M): Selection<T, M> {
  return Object.fromEntries(
    Object.entries(names).map(([as, column]) => [as, table[column as keyof T]]),
  ) as Selection<T, M>
}

type BatchColumn =
  | 'id'
  | 'status'
  | 'attempts'
  | 'model'
  | 'request_counts_total'
  | 'request_counts_completed'
  | 'request_counts_failed'

/**
 * A batch joined with its assignment, as the holder rule reads it (src/domain/worker-rules.ts
 * checkHolder), with the counts a progress report is checked against (checkProgress, which names
 * the total `total`) and what the requeue rule reads (src/domain/requeue.ts requeueDecision).
 */
export function holdingColumns<
  B extends Record<BatchColumn, unknown>,
  A extends Record<'worker_id' | 'id' | 'completed_at', unknown>,
>(batches: B, assignments: A) {
  return {
    ...select(batches, {
      id: 'id',
      status: 'status',
      attempts: 'attempts',
      model: 'model',
      request_counts_total: 'request_counts_total',
      total: 'request_counts_total',
      completed: 'request_counts_completed',
      failed: 'request_counts_failed',
    }),
    ...select(assignments, {
      holder: 'worker_id',
      assignment_id: 'id',
      assignment_completed_at: 'completed_at',
    }),
  }
}

/** A batch's status and the times it moved, from which the queue chart's points are rebuilt (timesSince). */
export function batchTimesColumns<
  B extends Record<'status' | 'created_at' | 'in_progress_at' | 'completed_at' | 'failed_at', unknown>,
>(batches: B) {
  return pick(batches, ['status', 'created_at', 'in_progress_at', 'completed_at', 'failed_at'])
}

const HOSTED = ['name', 'runtime', 'digest', 'loaded', 'advertised', 'configured', 'on_disk'] as const

/** What a worker hosts (docs/api.md §7 "hosts"): a worker_models row as the matching reads it. */
export function hostedModelColumns<M extends Record<(typeof HOSTED)[number], unknown>>(models: M) {
  return pick(models, HOSTED)
}

type Columns<K extends keyof typeof CATALOGUE_COLUMNS> = (typeof CATALOGUE_COLUMNS)[K][number]

/** The catalogue as the poll and the heartbeat read it (src/store/catalogue.ts readCatalogue), per table. */
export function catalogueColumns<
  E extends Record<Columns<'entries'>, unknown>,
  P extends Record<Columns<'profiles'>, unknown>,
  F extends Record<Columns<'artifacts'>, unknown>,
>(t: { entries: E; profiles: P; artifacts: F }) {
  return {
    entries: pick(t.entries, CATALOGUE_COLUMNS.entries),
    profiles: pick(t.profiles, CATALOGUE_COLUMNS.profiles),
    artifacts: pick(t.artifacts, CATALOGUE_COLUMNS.artifacts),
  }
}

/** An assignment whose run is under way: not completed, its batch in_progress (the holder rule's view). */
export function runningAssignment(
  assignments: Record<'completed_at', SQLWrapper>,
  batches: Record<'status', SQLWrapper>,
): SQL {
  return and(isNull(assignments.completed_at), eq(batches.status, 'in_progress'))!
}

/**
 * docs/api.md §5 (workers read their job's input): the file is the input of a batch in progress
 * that a current assignment of one of the org's workers holds.
 */
export function heldInputOf(
  t: {
    files: Record<'id', SQLWrapper>
    batches: SQLWrapper & Record<'id' | 'status' | 'input_file_id', SQLWrapper>
    assignments: SQLWrapper & Record<'batch_id' | 'org_id' | 'completed_at', SQLWrapper>
  },
  fileId: string,
  orgId: string,
): SQL {
  const { files, batches: b, assignments: a } = t
  return sql`${files.id} = ${fileId} AND ${files.id} IN (SELECT ${b.input_file_id} FROM ${a}
    JOIN ${b} ON ${b.id} = ${a.batch_id}
    WHERE ${a.org_id} = ${orgId} AND ${runningAssignment(a, b)} AND ${b.input_file_id} = ${fileId})`
}

type FileColumns = Record<'user_id' | 'purpose' | 'expires_at', SQLWrapper>

/** Not expired at `now` (docs/api.md §15): no expiry, or one still ahead. */
export function liveFile(files: FileColumns, now: number): SQL {
  return or(isNull(files.expires_at), gt(files.expires_at, now))!
}

/** GET /v1/files: the owner's files not expired at `now`, of one purpose when asked. */
export function listedFiles(
  files: FileColumns,
  filter: { ownerId: string; purpose?: FileRow['purpose']; now: number },
): SQL {
  return and(
    eq(files.user_id, filter.ownerId),
    filter.purpose ? eq(files.purpose, filter.purpose) : undefined,
    liveFile(files, filter.now),
  )!
}

/** GET /v1/audit-events (docs/api.md §17): the entries within `f`. */
export function auditWhere(
  events: Record<
    | 'actor_user_id'
    | 'actor_id'
    | 'actor_kind'
    | 'action'
    | 'target_kind'
    | 'target_id'
    | 'org_id'
    | 'created_at',
    SQLWrapper
  >,
  f: AuditFilter,
): SQL | undefined {
  const a = f.actor
  return and(
    a?.by === 'user' ? eq(events.actor_user_id, a.id) : undefined,
    a?.by === 'key' ? eq(events.actor_id, a.id) : undefined,
    a?.by === 'kind' ? eq(events.actor_kind, a.kind) : undefined,
    f.actions ? inArray(events.action, f.actions) : undefined,
    f.target_kind ? eq(events.target_kind, f.target_kind) : undefined,
    f.target_id !== undefined ? eq(events.target_id, f.target_id) : undefined,
    f.org_id !== undefined ? eq(events.org_id, f.org_id) : undefined,
    f.visible_orgs ? inArray(events.org_id, f.visible_orgs) : undefined,
    f.start !== undefined ? gte(events.created_at, f.start) : undefined,
    f.end !== undefined ? lt(events.created_at, f.end) : undefined,
  )
}

type MessageColumns = Record<'id' | 'lease' | 'attempts', SQLWrapper>

/** docs/api.md §13: a delivery attempt's outcome on its message, whose lease it releases. */
export function attemptOutcome(messages: MessageColumns, result: AttemptResult) {
  return {
    status: result.status,
    next_attempt_at: result.next_attempt_at,
    attempts: sql`${messages.attempts} + 1`,
    lease: null,
  }
}

/** The message while `lease` still holds it (a lapsed lease's deliverer writes nothing). */
export function leaseHeld(messages: MessageColumns, messageId: string, lease: string): SQL {
  return and(eq(messages.id, messageId), eq(messages.lease, lease))!
}

type LivenessColumns = Record<'id' | 'status' | 'last_seen_at', SQLWrapper>

/** src/domain/sweep.ts goesOffline in SQL: an online worker last seen at or before the cutoff. */
export function goesOfflineWhere(workers: LivenessColumns, cutoff: number): SQL {
  return and(eq(workers.status, 'online'), lte(workers.last_seen_at, cutoff))!
}

/**
 * src/domain/sweep.ts holderSilent in SQL, over a batch left-joined with its assignment and its
 * holder: an in_progress batch whose holder is gone, offline or silent. A split batch has no holder:
 * its shards have theirs.
 */
export function orphanedBatch(
  batches: Record<'status' | 'split', SQLWrapper>,
  workers: LivenessColumns,
  cutoff: number,
): SQL {
  return and(
    eq(batches.status, 'in_progress'),
    eq(batches.split, false),
    or(isNull(workers.id), eq(workers.status, 'offline'), lte(workers.last_seen_at, cutoff)),
  )!
}

/** GET /v1/batches (docs/api.md §6): the owner's batches (all of them for no owner), of one status when asked. */
export function listedBatches(
  batches: Record<'user_id' | 'status', SQLWrapper>,
  filter: { ownerId: string | null; status?: BatchStatus },
): SQL | undefined {
  return and(
    filter.ownerId === null ? undefined : eq(batches.user_id, filter.ownerId),
    filter.status ? eq(batches.status, filter.status) : undefined,
  )
}

/**
 * docs/api.md §2 password reset: the token is redeemable once — unused, not expired, and its user
 * still active.
 */
export function redeemableToken(
  tokens: Record<'token_hash' | 'used_at' | 'expires_at' | 'user_id', SQLWrapper>,
  users: SQLWrapper & Record<'id' | 'is_active', SQLWrapper>,
  tokenHash: string,
  now: number,
): SQL {
  return and(
    eq(tokens.token_hash, tokenHash),
    isNull(tokens.used_at),
    gt(tokens.expires_at, now),
    sql`${tokens.user_id} IN (SELECT ${users.id} FROM ${users} WHERE ${eq(users.is_active, true)})`,
  )!
}

/** A new password: `must_change_password` cleared, older JWTs revoked by the token version. */
export function newPassword(users: Record<'token_version', SQLWrapper>, hash: string, now: number) {
  return {
    password_hash: hash,
    must_change_password: false,
    token_version: sql`${users.token_version} + 1`,
    updated_at: now,
  }
}

/**
 * PATCH /v1/admin/users/{id} (docs/api.md §9): the change, with the token version bumped when it
 * moves the platform role (src/domain/admin-rules.ts changesRole), so older JWTs stop.
 */
export function userChange(
  users: Record<'token_version', SQLWrapper>,
  target: Pick<UserRow, 'platform_role'>,
  changes: UserChanges,
  now: number,
) {
  return {
    ...changes,
    ...(changesRole(target, changes) ? { token_version: sql`${users.token_version} + 1` } : {}),
    updated_at: now,
  }
}

/** The keys of `owner` (docs/api.md §1–3): a user's personal keys, or an org's worker keys. */
export function keyOwnedBy(
  apiKeys: Record<'key_type' | 'user_id' | 'org_id', SQLWrapper>,
  owner: KeyOwner,
): SQL {
  return owner.type === 'personal'
    ? and(eq(apiKeys.key_type, 'personal'), eq(apiKeys.user_id, owner.userId))!
    : and(eq(apiKeys.key_type, 'worker'), eq(apiKeys.org_id, owner.orgId))!
}

/**
 * docs/api.md §2 "Single sign-on", a terminal's sign-in: in this browser, vouched for, its code
 * waiting for the person's word (confirmed or cancelled in the browser that started it).
 */
export function awaitingConfirmation(
  logins: Record<'browser_hash' | 'redirect_uri' | 'user_id' | 'code_hash' | 'expires_at', SQLWrapper>,
  browserHash: string,
  now: number,
): SQL {
  return and(
    eq(logins.browser_hash, browserHash),
    isNotNull(logins.redirect_uri),
    isNotNull(logins.user_id),
    isNull(logins.code_hash),
    gt(logins.expires_at, now),
  )!
}
