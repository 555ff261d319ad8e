import { describe, expect, test } from 'bun:test'
import type { UserRow } from '../../src/db/schema'
import { planSsoSignIn, roleFromGroups, type SsoClaims, type SsoPolicy } from '../../src/domain/sso-rules'

// docs/api.md §2 "Single sign-on": which account a provider's sign-in reaches, decided once.

const user = (over: Partial<UserRow> = {}): UserRow =>
  ({
    id: 'user_a',
    email: 'grace@lab.example',
    platform_role: 'user',
    is_active: true,
    ...over,
  }) as UserRow

const claims = (over: Partial<SsoClaims> = {}): SsoClaims => ({
  subject: 'sub-1',
  email: 'grace@lab.example',
  email_verified: true,
  name: 'Grace',
  ...over,
})

const open: SsoPolicy = { allowedDomains: [], adminGroups: [] }
const labOnly: SsoPolicy = { allowedDomains: ['lab.example'], adminGroups: [] }

const refusal = (fn: () => unknown) => {
  try {
    fn()
  } catch (error) {
    return (error as { status: number; errorCode: string; message: string }) ?? null
  }
  return null
}

describe('an email the provider has not verified is no email', () => {
  test('it makes no account: 403 email_not_verified, saying why', () => {
    const refused = refusal(() =>
      planSsoSignIn(claims({ email_verified: false }), open, undefined, undefined),
    )
    expect(refused).toMatchObject({ status: 403, errorCode: 'email_not_verified' })
    expect(refused!.message).toContain('an account is made only for a verified email address')
    // A provider that says nothing about it has not verified it either.
    expect(
      refusal(() => planSsoSignIn(claims({ email_verified: undefined }), open, undefined, undefined)),
    ).toMatchObject({ errorCode: 'email_not_verified' })
  })

  test('it joins no account', () => {
    expect(
      refusal(() => planSsoSignIn(claims({ email_verified: false }), open, undefined, user())),
    ).toMatchObject({ status: 403, errorCode: 'email_not_verified' })
  })

  test('it passes no OIDC_ALLOWED_DOMAINS, not even for an identity linked already', () => {
    for (const linked of [undefined, user()])
      expect(
        refusal(() => planSsoSignIn(claims({ email_verified: false }), labOnly, linked, undefined)),
      ).toMatchObject({ status: 403, errorCode: 'email_not_verified' })
    expect(planSsoSignIn(claims(), labOnly, undefined, undefined)).toMatchObject({ kind: 'create' })
  })

  test('without OIDC_ALLOWED_DOMAINS a linked identity signs in by its subject, whatever its email', () => {
    expect(planSsoSignIn(claims({ email_verified: false }), open, user(), undefined)).toMatchObject({
      kind: 'sign_in',
    })
    expect(planSsoSignIn(claims({ email: undefined }), open, user(), undefined)).toMatchObject({
      kind: 'sign_in',
    })
  })
})

describe('OIDC_ADMIN_GROUPS', () => {
  test('the groups claim decides the role both ways; unset, no role is decided', () => {
    expect(roleFromGroups(['physics', 'admins'], ['admins'])).toBe('superadmin')
    expect(roleFromGroups(['physics'], ['admins'])).toBe('user')
    expect(roleFromGroups([], ['admins'])).toBe('user')
    expect(roleFromGroups(['admins'], [])).toBeUndefined()
  })

  test('a sign-in without a groups claim leaves the role alone (and a new account is a user)', () => {
    expect(roleFromGroups(undefined, ['admins'])).toBeUndefined()
    const admins: SsoPolicy = { allowedDomains: [], adminGroups: ['admins'] }
    const superadmin = user({ platform_role: 'superadmin' })
    expect(planSsoSignIn(claims({ groups: undefined }), admins, superadmin, undefined)).toEqual({
      kind: 'sign_in',
      user: superadmin,
      role: undefined,
    })
    expect(planSsoSignIn(claims({ groups: undefined }), admins, undefined, undefined)).toMatchObject({
      kind: 'create',
      role: 'user',
    })
  })
})
