import { t } from 'elysia'
import type { UserRow } from '../../db/schema'
import { pick } from '../../lib/pick'

// The user object of docs/api.md §2. Never password, hashes, or keys.
export const UserObject = t.Object({
  id: t.String(),
  object: t.Literal('user'),
  email: t.String(),
  full_name: t.String(),
  platform_role: t.Union([t.Literal('user'), t.Literal('superadmin')]),
  is_active: t.Boolean(),
  must_change_password: t.Boolean(),
  created_at: t.Integer(),
})
export type UserObject = typeof UserObject.static

export const toUserObject = (u: UserRow): UserObject => ({
  id: u.id,
  object: 'user',
  ...pick(u, ['email', 'full_name', 'platform_role', 'is_active', 'must_change_password', 'created_at']),
})

export const Email = t.String({ minLength: 3, maxLength: 320, description: 'Email address' })
/** A password presented to be checked (login, current password); bounded before any hashing. */
export const Password = t.String({ maxLength: 4096, description: 'Password' })
// docs/api.md §2: a new password of the wrong length is a 400 `weak_password` whatever its length, so the
// schema sets no bound (the 4 MiB body limit does) and the service checks 8–256 before hashing.
export const NewPassword = t.String({ description: 'Password, 8 to 256 characters' })
export const FullName = t.String({ minLength: 1, maxLength: 200 })
