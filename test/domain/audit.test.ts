import { expect, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import {
  AUDIT_ACTION_NAMES,
  actorOf,
  auditFilter,
  checkDetails,
  keyChanged,
  userChanged,
} from '../../src/domain/audit'
import { ANONYMOUS } from '../../src/domain/principal'

// docs/api.md §17: what an audit entry says, decided once for both engines.

const section17 = readFileSync(join(import.meta.dir, '../../docs/api.md'), 'utf8').split('## §17')[1]!

test('docs/api.md §17 lists every action', () => {
  expect(AUDIT_ACTION_NAMES.length).toBeGreaterThan(20)
  expect(AUDIT_ACTION_NAMES.filter((a) => !section17.includes(`\`${a}\``))).toEqual([])
})

test('the actor of each kind of caller', () => {
  const user = { id: 'user_1' } as never
  expect(actorOf(ANONYMOUS)).toEqual({ kind: 'anonymous', id: null, user_id: null })
  expect(actorOf({ kind: 'user', via: 'jwt', user, keyId: null })).toEqual({
    kind: 'user',
    id: 'user_1',
    user_id: 'user_1',
  })
  expect(actorOf({ kind: 'user', via: 'personal_key', user, keyId: 'key_p' })).toEqual({
    kind: 'personal_key',
    id: 'key_p',
    user_id: 'user_1',
  })
  expect(actorOf({ kind: 'worker', orgId: 'org_1', keyId: 'key_w' })).toEqual({
    kind: 'worker_key',
    id: 'key_w',
    user_id: null,
  })
})

test('one event per thing that changed, none when nothing did', () => {
  const key = {
    id: 'key_1',
    key_type: 'worker' as const,
    org_id: 'org_1',
    name: 'a',
    prefix: 'gk-abc',
    expires_at: null,
    revoked_at: null,
  }
  expect(keyChanged(key, key)).toEqual([])
  expect(keyChanged(key, { ...key, name: 'b', revoked_at: 5 }).map((e) => [e.action, e.org_id])).toEqual([
    ['key.worker.renamed', 'org_1'],
    ['key.worker.revoked', 'org_1'],
  ])
  expect(keyChanged({ ...key, revoked_at: 3 }, { ...key, revoked_at: 3 })).toEqual([])
  const u = { id: 'user_1', platform_role: 'user' as const, is_active: true }
  expect(userChanged(u, u)).toEqual([])
  expect(userChanged(u, { platform_role: 'superadmin', is_active: false }).map((e) => e.action)).toEqual([
    'user.role_changed',
    'user.disabled',
  ])
})

test('a detail named like a secret is refused, at any depth', () => {
  for (const details of [{ password: 'x' }, { a: [{ key_hash: 'x' }] }, { token: 1 }, { key: 'gk-…' }])
    expect(() => checkDetails(details)).toThrow(/names a secret/)
  expect(() => checkDetails({ name: 'ci', prefix: 'gk-abc', replaced: ['key_1'] })).not.toThrow()
})

test('filters: families expand to their actions; bad values are 400s naming the parameter', () => {
  expect(auditFilter({ action: 'org.member.*' }).actions).toEqual([
    'org.member.added',
    'org.member.role_changed',
    'org.member.removed',
  ])
  expect(auditFilter({ actor: 'user_x' }).actor).toEqual({ by: 'user', id: 'user_x' })
  expect(auditFilter({ actor: 'key_x' }).actor).toEqual({ by: 'key', id: 'key_x' })
  expect(auditFilter({ actor: 'system' }).actor).toEqual({ by: 'kind', kind: 'system' })
  expect(auditFilter({ start: '10', end: '20' })).toMatchObject({ start: 10, end: 20 })
  for (const [q, param] of [
    [{ actor: 'org_1' }, 'actor'],
    [{ action: 'org.member' }, 'action'],
    [{ target_kind: 'batch' }, 'target_kind'],
    [{ start: '1.5' }, 'start'],
    [{ end: '999999999999999' }, 'end'],
    [{ start: '20', end: '20' }, 'start'],
  ] as const)
    expect(() => auditFilter(q)).toThrow(expect.objectContaining({ status: 400, param }))
})
