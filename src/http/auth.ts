import { Elysia } from 'elysia'
import type { Deps } from '../deps'
import {
  ANONYMOUS,
  type AnonymousPrincipal,
  type Principal,
  type UserPrincipal,
  type WorkerPrincipal,
} from '../domain/principal'
import { forbidden, unauthorized } from '../lib/errors'
import { factsOf, type RequestFacts, requestFacts } from './context'
import type { CredentialState } from './credential-cache'
import { authenticate } from './credentials'

// The credential matrix of docs/api.md §1, enforced here and only here (ARCHITECTURE.md rule 4). A route
// declares its level as a macro flag, e.g. `{ user: true }`; the level says which credentials it
// accepts (test/http/credential-matrix.test.ts checks that every route declares exactly one). The
// wrong type of credential is a 401, never silently another meaning. The header is resolved before
// routing (readCredential) and checked in `transform`, before body validation, so an
// unauthenticated caller learns nothing about a route's schema.
//
//   public      no credential needed; any Authorization header is ignored (signup, login, reset)
//   session     JWT only, even while must_change_password (me, change-password)
//   jwt         JWT only (orgs, personal key management)
//   user        JWT or personal key (files, batches, models, key regenerate, audit events: the
//               service gives a superadmin all, an org's owners and admins theirs: docs/api.md §17)
//   self        JWT, or a personal key naming its own id in the path (a key revokes itself)
//   superadmin  JWT of a superadmin (/v1/admin/**); another user's JWT is a 403
//   worker      worker key only (/workers/**)
//   optional    anyone; JWT or personal key → user, worker key or nothing → anonymous (pool capacity)
//   reader      JWT, personal key or worker key (GET /v1/files/{id}/content; the service checks which)

export const AUTH_LEVELS = [
  'public',
  'session',
  'jwt',
  'user',
  'self',
  'superadmin',
  'worker',
  'optional',
  'reader',
] as const
export type AuthLevel = (typeof AUTH_LEVELS)[number]

type PrincipalFor<L extends AuthLevel> = L extends 'public'
  ? AnonymousPrincipal
  : L extends 'worker'
    ? WorkerPrincipal
    : L extends 'optional'
      ? UserPrincipal | AnonymousPrincipal
      : L extends 'reader'
        ? UserPrincipal | WorkerPrincipal
        : UserPrincipal

const DESCRIPTIONS: Record<AuthLevel, string> = {
  public: 'No credential.',
  session: 'JWT from login (allowed while a password change is pending).',
  jwt: 'JWT from login.',
  user: 'JWT from login or a personal API key.',
  self: 'JWT from login, or a personal API key naming its own id (a key revokes itself).',
  superadmin: 'JWT of a superadmin.',
  worker: 'Organization worker API key.',
  optional: 'Optional: JWT or personal key for the full view; anonymous callers get a reduced view.',
  reader: 'JWT, personal API key, or the worker key of the worker holding the batch.',
}

/** `keyId`: the route's `{key_id}`, which a personal key on a `self` route must be (docs/api.md §3). */
export const check = (level: AuthLevel, p: Principal, keyId?: string): Principal => {
  if (level === 'public') return ANONYMOUS
  if (level === 'optional') return p.kind === 'worker' ? ANONYMOUS : gate(level, p)
  if (p.kind === 'anonymous')
    throw unauthorized('missing_credential', 'This endpoint requires a Bearer credential')
  if (level === 'worker') {
    if (p.kind !== 'worker')
      throw unauthorized('wrong_credential_type', 'This endpoint requires a worker API key')
    return p
  }
  if (p.kind === 'worker') {
    if (level === 'reader') return p
    throw unauthorized('wrong_credential_type', 'Worker keys are accepted only on /workers endpoints')
  }
  const jwtOnly = level === 'session' || level === 'jwt' || level === 'superadmin'
  if (jwtOnly && p.via !== 'jwt') {
    throw unauthorized('wrong_credential_type', 'This endpoint requires a JWT from login, not an API key')
  }
  if (level === 'session') return p
  gate(level, p)
  // docs/api.md §3 (ext): a personal key may act on itself only; another id is refused without
  // being looked up, so nothing about other keys is learnt.
  if (level === 'self' && p.via === 'personal_key' && p.keyId !== keyId)
    throw forbidden('own_key_only', 'A personal key may revoke only itself; use a JWT for other keys')
  if (level === 'superadmin' && p.user.platform_role !== 'superadmin') {
    throw forbidden('superadmin_required', 'This endpoint is for superadmins')
  }
  return p
}

// docs/api.md §1: until the password is changed, a password login's session may only read /me and
// change the password. The flag is about passwords: a session begun by single sign-on, and the
// personal keys (which only a session not held back can have made), are not held back.
function gate(_level: AuthLevel, p: Principal): Principal {
  if (p.kind === 'user' && p.via === 'jwt' && !p.sso && p.user.must_change_password) {
    throw forbidden('password_change_required', 'Change your password first (POST /v1/auth/change-password)')
  }
  return p
}

/**
 * Who the request's Authorization header names, resolved before routing (src/http/lifecycle.ts)
 * onto its facts: at once for a credential seen a moment ago, else through the promise returned,
 * which the request awaits before it is routed. Routes then check it without awaiting anything, so
 * a route whose answer is at hand is answered without a promise. A failure is kept, not thrown:
 * public routes ignore the header, the others answer with it.
 */
export function readCredential(
  deps: Deps & CredentialState,
  request: Request,
  f: RequestFacts,
): Promise<void> | undefined {
  let who: Principal | Promise<Principal>
  try {
    who = authenticate(deps, request.headers.get('authorization'))
  } catch (failed) {
    f.credential = { failed }
    return
  }
  if (!(who instanceof Promise)) {
    f.credential = who
    return
  }
  return who.then(
    (p) => {
      f.credential = p
    },
    (failed) => {
      f.credential = { failed }
    },
  )
}

function admitted(credential: RequestFacts['credential']): Principal {
  if ('failed' in credential) throw credential.failed
  return credential
}

const admitLevel =
  (l: AuthLevel) =>
  ({ request }: { request: Request }) => {
    const f = factsOf(request)
    f.principal = l === 'public' ? ANONYMOUS : check(l, admitted(f.credential))
  }

/** The `self` level also reads the path's `{key_id}`; only its routes pay for the params. */
function admitSelf({ request, params }: { request: Request; params: Record<string, string | undefined> }) {
  const f = factsOf(request)
  f.principal = check('self', admitted(f.credential), params.key_id)
}

function level<L extends AuthLevel>(l: L) {
  return {
    detail: {
      description: `Auth: ${DESCRIPTIONS[l]}`,
      'x-gridkeep-auth': l,
      ...(l === 'public' ? {} : { security: [{ bearerAuth: [] }] }),
    },
    // Synchronous, and written so that Elysia's compiler sees it so (admitLevel, admitSelf): it
    // compiles a route with any hook it takes for async (one that mentions await, or returns a
    // call) into an async handler, and a promise costs every request of the route.
    transform: l === 'self' ? admitSelf : admitLevel(l),
    resolve({ request }: { request: Request }) {
      return { principal: requestFacts(request)?.principal as PrincipalFor<L> }
    },
  }
}

// Each level is its own macro so the handler's `principal` has exactly the type that level admits.
// Named and seeded per server (deps.instanceId): Elysia keeps one of the plugins of the same name
// and seed it is given, and never mixes two servers' (tests build several in one process).
export const authPlugin = (deps: Deps & CredentialState) =>
  new Elysia({ name: 'http.auth', seed: deps.instanceId }).macro({
    public: level('public'),
    session: level('session'),
    jwt: level('jwt'),
    user: level('user'),
    self: level('self'),
    superadmin: level('superadmin'),
    worker: level('worker'),
    optional: level('optional'),
    reader: level('reader'),
  })
