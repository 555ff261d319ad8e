import { and, count, eq, ne, sql } from 'drizzle-orm'
import { memberships, organizations, type UserRow, users } from '../../db/schema'
import { writeTx } from '../../db/tx'
import type { Deps } from '../../deps'
import { badRequest, notFound } from '../../lib/errors'
import { log } from '../../lib/logger'
import { type PageParams, pageRows, toPage } from '../../lib/pagination'
import type { UserPrincipal } from '../auth/credentials'
import { toUserObject } from '../users/model'
import { createUser } from '../users/service'

// Superadmin views (SPEC §4, API.md §9). Route access is the auth plugin's `superadmin` level.

export function listUsers(deps: Deps, query: PageParams) {
  const { rows, has_more } = pageRows<UserRow>(deps.db, users, undefined, query)
  return toPage(rows.map(toUserObject), has_more)
}

/** (ext) An admin-made account must change its password at first login. */
export async function createUserAsAdmin(
  deps: Deps,
  by: UserPrincipal,
  input: { email: string; full_name: string; password: string },
) {
  const user = await createUser(deps, { ...input, must_change_password: true })
  log.info('user created by admin', { user_id: user.id, by: by.user.id })
  return toUserObject(user)
}

export function updateUser(
  deps: Deps,
  by: UserPrincipal,
  userId: string,
  input: { is_active?: boolean; platform_role?: 'user' | 'superadmin' },
) {
  const row = writeTx(deps.db, (tx) => {
    const target = tx.select().from(users).where(eq(users.id, userId)).get()
    if (!target) throw notFound('user_not_found', 'No such user', 'user_id')
    const losesSuperadmin =
      target.platform_role === 'superadmin' &&
      target.is_active &&
      (input.platform_role === 'user' || input.is_active === false)
    if (losesSuperadmin) {
      const others = tx
        .select({ n: count() })
        .from(users)
        .where(and(eq(users.platform_role, 'superadmin'), eq(users.is_active, true), ne(users.id, userId)))
        .get()!.n
      if (others === 0)
        throw badRequest('last_superadmin', 'The last active superadmin cannot be demoted or deactivated')
    }
    return tx
      .update(users)
      .set({ ...input, updated_at: deps.clock.now() })
      .where(eq(users.id, userId))
      .returning()
      .get()
  })
  log.info('user updated by admin', { user_id: userId, by: by.user.id, ...input })
  return toUserObject(row)
}

export function listOrganizations(deps: Deps, query: PageParams) {
  const { rows, has_more } = pageRows<typeof organizations.$inferSelect>(
    deps.db,
    organizations,
    undefined,
    query,
  )
  const counts = new Map<string, number>()
  if (rows.length) {
    const ids = rows.map((r) => r.id)
    for (const c of deps.db
      .select({ org_id: memberships.org_id, n: count() })
      .from(memberships)
      .where(sql`${memberships.org_id} in ${ids}`)
      .groupBy(memberships.org_id)
      .all())
      counts.set(c.org_id, c.n)
  }
  return toPage(
    rows.map((o) => ({
      id: o.id,
      object: 'organization' as const,
      name: o.name,
      personal: o.personal,
      member_count: counts.get(o.id) ?? 0,
      created_at: o.created_at,
    })),
    has_more,
  )
}
