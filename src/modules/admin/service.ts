import type { Deps } from '../../deps'
import type { AuditContext } from '../../domain/audit'
import type { UserPrincipal } from '../../domain/principal'
import type { CredentialState } from '../../http/credential-cache'
import { credentialsChanged } from '../../http/credential-cache'
import { badRequest, notFound } from '../../lib/errors'
import { log } from '../../lib/logger'
import { type PageParams, toPage } from '../../lib/pagination'
import { toUserObject } from '../users/model'
import { createUser } from '../users/service'

// Superadmin views (docs/api.md §9, docs/api.md §9). Route access is the auth plugin's `superadmin` level.

export async function listUsers(deps: Deps & CredentialState, query: PageParams) {
  const { rows, has_more } = await deps.store.accounts.listUsers(query)
  return toPage(rows.map(toUserObject), has_more)
}

/**
 * (ext) An admin-made account must change its first password at first login. With
 * PASSWORD_LOGIN=false there are no passwords (docs/api.md §9): it gets none, and its owner signs in
 * by single sign-on, which joins the account through the provider's verified email.
 */
export async function createUserAsAdmin(
  deps: Deps & CredentialState,
  by: UserPrincipal,
  input: { email: string; full_name: string; password?: string },
  audit: AuditContext,
) {
  const { email, full_name, password } = input
  if (!deps.config.PASSWORD_LOGIN && password !== undefined)
    throw badRequest(
      'password_login_disabled',
      `Passwords are not used on this server (PASSWORD_LOGIN=false): leave password out; the user signs in with ${deps.config.OIDC_NAME}`,
      'password',
    )
  if (deps.config.PASSWORD_LOGIN && password === undefined)
    throw badRequest('invalid_value', 'password is required: the user signs in with it first', 'password')
  const user = await createUser(
    deps,
    password === undefined
      ? { email, full_name }
      : { email, full_name, password, must_change_password: true },
    audit,
  )
  log.info('user created by admin', { user_id: user.id, by: by.user.id })
  return toUserObject(user)
}

/** The last active superadmin is never demoted or deactivated (src/domain/admin-rules.ts, checked by the store). */
export async function updateUser(
  deps: Deps & CredentialState,
  by: UserPrincipal,
  userId: string,
  input: { is_active?: boolean; platform_role?: 'user' | 'superadmin' },
  audit: AuditContext,
) {
  const row = await deps.store.accounts.updateUser(userId, input, deps.clock.now(), audit)
  if (!row) throw notFound('user_not_found', 'No such user', 'user_id')
  // A deactivation or a new platform role holds from the user's next request, on every instance.
  credentialsChanged(deps, [userId])
  log.info('user updated by admin', { user_id: userId, by: by.user.id, ...input })
  return toUserObject(row)
}

export async function listOrganizations(deps: Deps & CredentialState, query: PageParams) {
  const { rows, has_more } = await deps.store.orgs.listAllOrgs(query)
  return toPage(
    rows.map((o) => ({
      id: o.id,
      object: 'organization' as const,
      name: o.name,
      personal: o.personal,
      member_count: o.member_count,
      created_at: o.created_at,
    })),
    has_more,
  )
}
