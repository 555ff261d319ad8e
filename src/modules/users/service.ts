import { eq } from 'drizzle-orm'
import { memberships, organizations, type UserRow, users } from '../../db/schema'
import type { Tx } from '../../db/tx'
import { writeTx } from '../../db/tx'
import type { Deps } from '../../deps'
import { badRequest, conflict } from '../../lib/errors'
import { newId } from '../../lib/ids'

// Creating users is shared by signup, the admin's create-user and the first-start superadmin:
// each gets a Personal Org with an owner membership in the same transaction (SPEC §2).

const EMAIL = /^[^\s@]+@[^\s@]+$/

export function normalizeEmail(raw: string): string {
  const email = raw.trim().toLowerCase()
  if (!EMAIL.test(email) || email.length > 254)
    throw badRequest('invalid_email', 'Not a valid email address', 'email')
  return email
}

export function checkPassword(password: string, param = 'password'): void {
  if (password.length < 8 || password.length > 256) {
    throw badRequest('weak_password', 'Passwords must be 8 to 256 characters long', param)
  }
}

export interface NewUser {
  email: string
  password: string
  full_name: string
  platform_role?: 'user' | 'superadmin'
  must_change_password?: boolean
}

export async function createUser(deps: Deps, input: NewUser): Promise<UserRow> {
  const email = normalizeEmail(input.email)
  checkPassword(input.password)
  const full_name = input.full_name.trim()
  if (!full_name) throw badRequest('invalid_value', 'full_name must not be blank', 'full_name')
  // Hash before taking the write lock: argon2 is slow and must never run inside a transaction.
  const password_hash = await deps.passwords.hash(input.password)
  const now = deps.clock.now()
  return writeTx(deps.db, (tx) => {
    if (tx.select({ id: users.id }).from(users).where(eq(users.email, email)).get()) {
      throw conflict('email_taken', 'This email is already registered', 'email')
    }
    const user = tx
      .insert(users)
      .values({
        id: newId('user_'),
        email,
        password_hash,
        full_name,
        platform_role: input.platform_role ?? 'user',
        must_change_password: input.must_change_password ?? false,
        created_at: now,
        updated_at: now,
      })
      .returning()
      .get()
    createPersonalOrg(tx, user, now)
    return user
  })
}

function createPersonalOrg(tx: Tx, user: UserRow, now: number) {
  const org = tx
    .insert(organizations)
    .values({ id: newId('org_'), name: `${user.full_name}'s Personal Org`, personal: true, created_at: now })
    .returning()
    .get()
  tx.insert(memberships).values({ org_id: org.id, user_id: user.id, role: 'owner', created_at: now }).run()
}

export function getUserById(deps: Deps, id: string): UserRow | undefined {
  return deps.db.select().from(users).where(eq(users.id, id)).get()
}
