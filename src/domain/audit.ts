import type {
  ApiKeyRow,
  CatalogEntryRow,
  FileRow,
  NewAuditEventRow,
  OrgRole,
  UserRow,
  WorkerRow,
} from '../db/schema'
import { badRequest } from '../lib/errors'
import { newId } from '../lib/ids'
import type { Principal } from './principal'

// The audit log (docs/api.md §17): every security-relevant change writes one
// append-only entry in the change's own transaction. What an entry says is decided here, once: the
// actions, who the actor is, the entry each change makes from the rows it touched. Each engine
// writes the entries inside its transaction (src/store/*/audit.ts appendAudit).

/** What an entry is about. */
export const AUDIT_TARGET_KINDS = ['user', 'key', 'org', 'worker', 'file', 'catalogue', 'audit'] as const
export type AuditTargetKind = (typeof AUDIT_TARGET_KINDS)[number]

const KEY_VERBS = {
  created: 'was created',
  renamed: 'was renamed',
  expiry_set: 'got a new expiry (or none)',
  revoked: 'was revoked',
  regenerated: 'was issued in place of revoked keys (regenerate)',
} as const
type KeyVerb = keyof typeof KEY_VERBS

const keyActions = <T extends ApiKeyRow['key_type']>(type: T, owner: string) =>
  Object.fromEntries(
    (Object.keys(KEY_VERBS) as KeyVerb[]).map((verb) => [
      `key.${type}.${verb}`,
      { target: 'key', description: `${owner} ${KEY_VERBS[verb]}` },
    ]),
  ) as Record<`key.${T}.${KeyVerb}`, { target: 'key'; description: string }>

/**
 * Every action, with the kind of its target and what it means (docs/api.md §17 lists them). The
 * `action` filter takes a name or a family (`key.*`, `org.member.*`).
 */
export const AUDIT_ACTIONS = {
  'auth.signed_in': { target: 'user', description: 'A user signed in and got a session' },
  'auth.sign_in_failed': {
    target: 'user',
    description:
      'A sign-in was refused: wrong email or password, a deactivated account, or an identity the single sign-on rules turn away',
  },
  'user.created': {
    target: 'user',
    description: 'A user was created (signup, by an admin, at first start, or at a first single sign-on)',
  },
  'user.role_changed': {
    target: 'user',
    description: "A user's platform role was changed (by an admin, or by OIDC_ADMIN_GROUPS at a sign-in)",
  },
  'user.role_change_refused': {
    target: 'user',
    description:
      'OIDC_ADMIN_GROUPS would have taken the role of the last active superadmin at a sign-in; the role was kept',
  },
  'user.identity_linked': {
    target: 'user',
    description:
      'An existing account was joined to an identity at the identity provider (its verified email)',
  },
  'user.disabled': { target: 'user', description: 'A user was deactivated' },
  'user.enabled': { target: 'user', description: 'A user was activated again' },
  'user.password_changed': { target: 'user', description: 'A user changed their password' },
  'user.password_reset': { target: 'user', description: 'A password was set with a reset token' },
  ...keyActions('personal', "A user's personal key"),
  ...keyActions('worker', "An organization's worker key"),
  'org.created': { target: 'org', description: 'A team organization was created' },
  'org.deleted': {
    target: 'org',
    description: 'A team organization was deleted, its worker keys revoked and its members removed',
  },
  'org.member.added': { target: 'user', description: 'A user was added to an organization' },
  'org.member.role_changed': { target: 'user', description: "A member's role was changed" },
  'org.member.removed': { target: 'user', description: 'A member was removed from an organization, or left' },
  'worker.removed': {
    target: 'worker',
    description: 'A worker was removed from its organization, what it held given back to the queue',
  },
  'catalogue.seeded': {
    target: 'catalogue',
    description: 'The catalogue was changed from the manifest (inserted, updated or renamed entries)',
  },
  'file.deleted': { target: 'file', description: 'A file was deleted by its owner' },
  'retention.files_expired': {
    target: 'file',
    description: 'The retention pass deleted expired files (FILE_RETENTION_DAYS, expires_after)',
  },
  'audit.expired': {
    target: 'audit',
    description: 'The retention pass deleted audit entries older than AUDIT_RETENTION_DAYS',
  },
} as const satisfies Record<string, { target: AuditTargetKind; description: string }>

export type AuditAction = keyof typeof AUDIT_ACTIONS
export const AUDIT_ACTION_NAMES = Object.keys(AUDIT_ACTIONS) as AuditAction[]

/** Who acted: a JWT's user, a key, the server itself, or a caller with no credential (a sign-in). */
export type AuditActorKind = 'user' | 'personal_key' | 'worker_key' | 'system' | 'anonymous'
export interface AuditActor {
  kind: AuditActorKind
  /** The user id (`user`) or key id (`personal_key`, `worker_key`); null otherwise. */
  id: string | null
  /** The user behind the actor: the JWT's user or the personal key's owner. */
  user_id: string | null
}

/** Who and from where, as a service passes it to the store with a change. */
export interface AuditContext {
  actor: AuditActor
  ip: string | null
  user_agent: string | null
}

/** The server's own changes: the retention pass, the catalogue seed, the first superadmin. */
export const SYSTEM_AUDIT: AuditContext = Object.freeze({
  actor: Object.freeze({ kind: 'system', id: null, user_id: null }),
  ip: null,
  user_agent: null,
}) as AuditContext

/** The actor a request's principal is. */
export function actorOf(p: Principal): AuditActor {
  if (p.kind === 'anonymous') return { kind: 'anonymous', id: null, user_id: null }
  if (p.kind === 'worker') return { kind: 'worker_key', id: p.keyId, user_id: null }
  if (p.via === 'personal_key') return { kind: 'personal_key', id: p.keyId, user_id: p.user.id }
  return { kind: 'user', id: p.user.id, user_id: p.user.id }
}

/** A request's context with the signed-in user as its actor (a sign-in's caller has no credential yet). */
export const asUser = (ctx: AuditContext, userId: string): AuditContext => ({
  ...ctx,
  actor: { kind: 'user', id: userId, user_id: userId },
})

/** What one change says: its action, its target and org, and details that are never a secret. */
export interface AuditEvent {
  action: AuditAction
  target_id: string | null
  org_id: string | null
  details: Record<string, unknown>
}

const event = (
  action: AuditAction,
  target_id: string | null,
  details: Record<string, unknown> = {},
  org_id: string | null = null,
): AuditEvent => ({ action, target_id, org_id, details })

// ---- Accounts ---------------------------------------------------------------------------------

/** How a user signed in (docs/api.md §2): each method ends in the same session (auth/service.ts issueSession). */
export type SignInMethod = 'password' | 'sso'

export const signedIn = (user: Pick<UserRow, 'id'>, method: SignInMethod) =>
  event('auth.signed_in', user.id, { method })

/**
 * Why a sign-in was refused: the error code its caller got. The last three are single sign-on's
 * (docs/api.md §2): an email domain OIDC_ALLOWED_DOMAINS does not admit, an existing account's
 * email the provider has not verified, no email where one is needed.
 */
export type SignInRefusal =
  | 'invalid_credentials'
  | 'account_disabled'
  | 'email_domain_not_allowed'
  | 'email_not_verified'
  | 'email_required'

/** An identity at an identity provider, as an entry names it: the issuer and its subject. */
export interface IdentityFacts {
  issuer: string
  subject: string
}

/**
 * The email a sign-in named (the user's id when there is one), the method, and for single sign-on
 * the provider; never the password typed, nor any code or token of the provider.
 */
export const signInFailed = (
  email: string | null,
  user: Pick<UserRow, 'id'> | undefined,
  reason: SignInRefusal,
  method: SignInMethod,
  issuer?: string,
) =>
  event('auth.sign_in_failed', user?.id ?? null, {
    email: email === null ? null : email.slice(0, 254),
    reason,
    method,
    ...(issuer === undefined ? {} : { issuer }),
  })

/**
 * How a user came to be: made at a first single sign-on (with its identity), else read off the
 * actor: nobody signed in, the server, or an admin.
 */
export const userCreated = (
  user: Pick<UserRow, 'id' | 'email' | 'platform_role'>,
  actor: AuditActor,
  identity?: IdentityFacts,
) =>
  event('user.created', user.id, {
    email: user.email,
    platform_role: user.platform_role,
    ...(identity
      ? { via: 'sso', issuer: identity.issuer, subject: identity.subject }
      : { via: actor.kind === 'anonymous' ? 'signup' : actor.kind === 'system' ? 'first_start' : 'admin' }),
  })

/** An existing account joined to a provider's identity at a sign-in (docs/api.md §2). */
export const identityLinked = (userId: string, identity: IdentityFacts & { email: string | null }) =>
  event('user.identity_linked', userId, {
    issuer: identity.issuer,
    subject: identity.subject,
    email: identity.email,
  })

/**
 * OIDC_ADMIN_GROUPS deciding the role at a sign-in (docs/api.md §2): none when it is the role the
 * account has.
 */
export const ssoRoleChanged = (
  userId: string,
  from: UserRow['platform_role'],
  to: UserRow['platform_role'],
  issuer: string,
): AuditEvent[] => (from === to ? [] : [event('user.role_changed', userId, { from, to, via: 'sso', issuer })])

/**
 * OIDC_ADMIN_GROUPS would have demoted the last active superadmin (docs/api.md §2): the role is
 * kept, and the refusal recorded.
 */
export const ssoRoleRefused = (
  userId: string,
  from: UserRow['platform_role'],
  to: UserRow['platform_role'],
  issuer: string,
): AuditEvent[] => [
  event('user.role_change_refused', userId, { from, to, via: 'sso', issuer, reason: 'last_superadmin' }),
]

/**
 * Who an sso sign-in's changes are by (docs/api.md §17): linking the identity is the signing-in
 * user's act (they proved the email); the role OIDC_ADMIN_GROUPS sets is the server's, applying
 * the provider's groups, so its actor is `system`, with the sign-in's address and user agent.
 */
export const ssoActors = (ctx: AuditContext, userId: string) => ({
  user: asUser(ctx, userId),
  groups: { ...ctx, actor: SYSTEM_AUDIT.actor },
})

/** PATCH /v1/admin/users/{id}: one entry per thing that changed, none when nothing did. */
export function userChanged(
  before: Pick<UserRow, 'id' | 'platform_role' | 'is_active'>,
  after: Pick<UserRow, 'platform_role' | 'is_active'>,
): AuditEvent[] {
  const out: AuditEvent[] = []
  if (before.platform_role !== after.platform_role)
    out.push(event('user.role_changed', before.id, { from: before.platform_role, to: after.platform_role }))
  if (before.is_active !== after.is_active)
    out.push(event(after.is_active ? 'user.enabled' : 'user.disabled', before.id))
  return out
}

export const passwordChanged = (userId: string) => event('user.password_changed', userId)
export const passwordReset = (userId: string) => event('user.password_reset', userId, { via: 'reset_token' })

// ---- Keys -------------------------------------------------------------------------------------

type KeyFacts = Pick<ApiKeyRow, 'id' | 'key_type' | 'org_id' | 'name' | 'prefix' | 'expires_at'>

const keyEvent = (verb: KeyVerb, key: KeyFacts, details: Record<string, unknown>) =>
  event(`key.${key.key_type}.${verb}`, key.id, details, key.org_id)

/** The display prefix is what every listing shows; the raw key and its hash never appear. */
export const keyCreated = (key: KeyFacts) =>
  keyEvent('created', key, { name: key.name, prefix: key.prefix, expires_at: key.expires_at })

/** PUT/DELETE of a key: one entry per thing that changed (a second revocation changes nothing). */
export function keyChanged(
  before: KeyFacts & Pick<ApiKeyRow, 'revoked_at'>,
  after: Pick<ApiKeyRow, 'name' | 'expires_at' | 'revoked_at'>,
): AuditEvent[] {
  const out: AuditEvent[] = []
  if (before.name !== after.name) out.push(keyEvent('renamed', before, { from: before.name, to: after.name }))
  if (before.expires_at !== after.expires_at)
    out.push(keyEvent('expiry_set', before, { from: before.expires_at, to: after.expires_at }))
  if (before.revoked_at === null && after.revoked_at !== null)
    out.push(keyEvent('revoked', before, { name: before.name, prefix: before.prefix }))
  return out
}

/** A regeneration: the new key, and the keys it revoked (their ids in the entry). */
export const keyRegenerated = (key: KeyFacts, replaced: readonly Pick<ApiKeyRow, 'id'>[]) =>
  keyEvent('regenerated', key, {
    name: key.name,
    prefix: key.prefix,
    expires_at: key.expires_at,
    replaced: replaced.map((r) => r.id),
  })

// ---- Organizations ----------------------------------------------------------------------------

export const orgCreated = (org: { id: string; name: string }) =>
  event('org.created', org.id, { name: org.name }, org.id)

export const memberAdded = (orgId: string, userId: string, role: OrgRole) =>
  event('org.member.added', userId, { role }, orgId)

/** None when the role is the one the member had. */
export const memberRoleChanged = (orgId: string, userId: string, from: OrgRole, to: OrgRole) =>
  from === to ? [] : [event('org.member.role_changed', userId, { from, to }, orgId)]

export const memberRemoved = (orgId: string, userId: string, role: OrgRole, self: boolean) =>
  event('org.member.removed', userId, { role, left: self }, orgId)

/**
 * DELETE /v1/orgs/{org_id}: the org's name, the worker keys it revoked (by id and display prefix)
 * and the members it removed, with their roles.
 */
export const orgDeleted = (
  org: { id: string; name: string },
  keys: Pick<ApiKeyRow, 'id' | 'name' | 'prefix'>[],
  members: { user_id: string; role: OrgRole }[],
) =>
  event(
    'org.deleted',
    org.id,
    {
      name: org.name,
      revoked_keys: keys.map((k) => ({ id: k.id, name: k.name, prefix: k.prefix })),
      members: members.map((m) => ({ user_id: m.user_id, role: m.role })),
    },
    org.id,
  )

// ---- Workers ----------------------------------------------------------------------------------

/**
 * DELETE /v1/orgs/{org_id}/workers/{worker_id}: the worker as it was named, the key it registered
 * with, and the batches it gave back to the queue.
 */
export const workerRemoved = (
  worker: Pick<WorkerRow, 'id' | 'org_id' | 'name' | 'hostname' | 'key_id'>,
  requeued: string[],
) =>
  event(
    'worker.removed',
    worker.id,
    { name: worker.name, hostname: worker.hostname, key_id: worker.key_id, requeued },
    worker.org_id,
  )

// ---- Catalogue, files, retention --------------------------------------------------------------

/** One entry for a seed that changed anything (an unchanged start writes none). */
export function catalogueSeeded(
  entries: Pick<CatalogEntryRow, 'id'>[],
  outcomes: { result: 'inserted' | 'updated' | 'unchanged'; renamedFrom?: string }[],
): AuditEvent[] {
  const inserted: string[] = []
  const updated: string[] = []
  const renamed: { from: string; to: string }[] = []
  outcomes.forEach((o, i) => {
    const id = entries[i]!.id
    if (o.result === 'inserted') inserted.push(id)
    if (o.result === 'updated') updated.push(id)
    if (o.renamedFrom) renamed.push({ from: o.renamedFrom, to: id })
  })
  if (!inserted.length && !updated.length && !renamed.length) return []
  return [event('catalogue.seeded', null, { inserted, updated, renamed })]
}

export const fileDeleted = (file: Pick<FileRow, 'id' | 'filename' | 'purpose' | 'bytes'>) =>
  event('file.deleted', file.id, { filename: file.filename, purpose: file.purpose, bytes: file.bytes })

/** One entry per retention transaction that deleted files, naming them. */
export const filesExpired = (files: Pick<FileRow, 'id' | 'bytes'>[]) =>
  files.length === 0
    ? []
    : [
        event('retention.files_expired', null, {
          count: files.length,
          bytes: files.reduce((n, f) => n + f.bytes, 0),
          file_ids: files.map((f) => f.id),
        }),
      ]

export const auditExpired = (count: number, before: number) =>
  count === 0 ? [] : [event('audit.expired', null, { count, before })]

// ---- The row ----------------------------------------------------------------------------------

// Names a secret would travel under. An entry carrying one is a bug in the code that built it: the
// write fails (and the change with it) rather than keep a secret (docs/api.md §17: never a secret).
const SECRET_NAME = /password|secret|token|hash|^key$|raw_?key/i

export function checkDetails(details: unknown, path = 'details'): void {
  if (Array.isArray(details)) {
    for (const [i, d] of details.entries()) checkDetails(d, `${path}[${i}]`)
  } else if (details && typeof details === 'object')
    for (const [k, v] of Object.entries(details)) {
      if (SECRET_NAME.test(k)) throw new Error(`audit entry refused: ${path}.${k} names a secret`)
      checkDetails(v, `${path}.${k}`)
    }
}

/** The stored row of one event. */
export function auditRow(ctx: AuditContext, e: AuditEvent, now: number): NewAuditEventRow {
  checkDetails(e.details)
  return {
    id: newId('aud_'),
    created_at: now,
    actor_kind: ctx.actor.kind,
    actor_id: ctx.actor.id,
    actor_user_id: ctx.actor.user_id,
    ip: ctx.ip,
    user_agent: ctx.user_agent,
    action: e.action,
    target_kind: AUDIT_ACTIONS[e.action].target,
    target_id: e.target_id,
    org_id: e.org_id,
    details: e.details,
  }
}

// ---- Reading ----------------------------------------------------------------------------------

/** GET /v1/audit-events' filters, checked (docs/api.md §17). */
export interface AuditFilter {
  /** By the user behind the actor, the key that acted, or the actor's kind (`system`, `anonymous`). */
  actor?:
    | { by: 'user'; id: string }
    | { by: 'key'; id: string }
    | { by: 'kind'; kind: 'system' | 'anonymous' }
  actions?: AuditAction[]
  target_kind?: AuditTargetKind
  target_id?: string
  org_id?: string
  /** The orgs a caller who is no superadmin may read (the orgs they own or administer). */
  visible_orgs?: string[]
  /** created_at at or after (Unix seconds). */
  start?: number
  /** created_at before (Unix seconds). */
  end?: number
}

export interface AuditQuery {
  actor?: string
  action?: string
  target_kind?: string
  target_id?: string
  org_id?: string
  start?: string
  end?: string
}

// 9999-12-31T23:59:59Z, the bound docs/api.md §14's times have too: an exact integer in both engines.
const MAX_TIME = 253_402_300_799

const time = (raw: string | undefined, param: 'start' | 'end') => {
  if (raw === undefined) return undefined
  const n = /^[0-9]{1,15}$/.test(raw) ? Number(raw) : Number.NaN
  if (!(n <= MAX_TIME))
    throw badRequest(
      'invalid_value',
      `Invalid query parameter '${param}': must be a time in Unix seconds, an integer from 0 to ${MAX_TIME}`,
      param,
    )
  return n
}

/** The filters of a query, or a 400 naming the parameter (docs/api.md §17 errors). */
export function auditFilter(q: AuditQuery): AuditFilter {
  const f: AuditFilter = {}
  if (q.actor !== undefined) {
    if (q.actor === 'system' || q.actor === 'anonymous') f.actor = { by: 'kind', kind: q.actor }
    else if (/^user_[0-9A-Za-z]+$/.test(q.actor)) f.actor = { by: 'user', id: q.actor }
    else if (/^key_[0-9A-Za-z]+$/.test(q.actor)) f.actor = { by: 'key', id: q.actor }
    else
      throw badRequest(
        'invalid_value',
        "Invalid query parameter 'actor': a user id, a key id, 'system' or 'anonymous'",
        'actor',
      )
  }
  if (q.action !== undefined) {
    const family = q.action.endsWith('.*') ? q.action.slice(0, -1) : undefined
    f.actions = AUDIT_ACTION_NAMES.filter((a) => (family ? a.startsWith(family) : a === q.action))
    if (f.actions.length === 0)
      throw badRequest(
        'invalid_value',
        `Invalid query parameter 'action': no action ${family ? 'in the family ' : ''}'${q.action}' (docs/api.md §17)`,
        'action',
      )
  }
  if (q.target_kind !== undefined) {
    if (!(AUDIT_TARGET_KINDS as readonly string[]).includes(q.target_kind))
      throw badRequest(
        'invalid_value',
        `Invalid query parameter 'target_kind': one of ${AUDIT_TARGET_KINDS.join(', ')}`,
        'target_kind',
      )
    f.target_kind = q.target_kind as AuditTargetKind
  }
  if (q.target_id !== undefined) f.target_id = q.target_id
  if (q.org_id !== undefined) f.org_id = q.org_id
  f.start = time(q.start, 'start')
  f.end = time(q.end, 'end')
  if (f.start !== undefined && f.end !== undefined && f.start >= f.end)
    throw badRequest('invalid_value', "Invalid query parameters: 'start' must be before 'end'", 'start')
  return f
}
