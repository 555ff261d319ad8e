import { afterEach, expect, test } from 'bun:test'
import { SYSTEM_AUDIT } from '../../src/domain/audit'
import { describeEngine, type StoreHarness, storeEngines } from '../helpers/stores'

// Organizations and memberships behave the same on SQLite and on PostgreSQL (docs/api.md §12); the
// last-owner rule holds against concurrent changes.

let n = 0
const newUser = (h: StoreHarness, full_name = 'U') =>
  h.store.accounts.createUser(
    {
      email: `o${++n}@x.test`,
      password_hash: 'h',
      full_name,
      platform_role: 'user',
      must_change_password: false,
      now: 1,
    },
    `${full_name}'s Personal Org`,
    SYSTEM_AUDIT,
  )

const settled = async (ps: Promise<unknown>[]) => {
  const all = await Promise.allSettled(ps)
  return {
    ok: all.filter((r) => r.status === 'fulfilled').length,
    errors: all.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason),
  }
}

for (const [kind, open] of storeEngines) {
  describeEngine(kind, `${kind} orgs`, () => {
    let h: StoreHarness
    afterEach(async () => {
      await h?.close()
    })

    test('deleteOrg (docs/api.md §3): a Personal Org and an org with workers refused; else the org, its keys and memberships go with one entry; a registration racing it is counted or finds no org', async () => {
      h = await open()
      const owner = await newUser(h)
      const member = await newUser(h)
      const personal = (await h.store.orgs.listMembershipsOf(owner.id))[0]!.org_id
      await expect(h.store.orgs.deleteOrg(personal, 30, SYSTEM_AUDIT)).rejects.toMatchObject({
        status: 409,
        errorCode: 'personal_org',
      })
      const team = await h.store.orgs.createTeamOrg('Lab', owner.id, 20, SYSTEM_AUDIT)
      await h.store.orgs.addMember(team.id, member.id, 'viewer', 21, SYSTEM_AUDIT)
      const key = await h.store.keys.createKey(
        { type: 'worker', orgId: team.id },
        {
          name: 'fleet',
          prefix: 'gk-aaaaaaaaa',
          key_hash: `hash-${team.id}`,
          created_by: owner.id,
          created_at: 22,
          expires_at: null,
        },
        SYSTEM_AUDIT,
      )
      const registration = (orgId: string) => ({
        orgId,
        workerId: undefined,
        machineId: undefined,
        fields: {
          name: 'box',
          hostname: null,
          daemon_version: null,
          key_id: key.id,
          max_concurrent_jobs: 1,
          max_download_gb: 0,
        },
        runtimes: [],
        gpus: [],
        models: [],
        now: 25,
      })
      const r = await h.store.fleet.register(registration(team.id))
      if ('notOwned' in r) throw new Error('unexpected')
      await expect(h.store.orgs.deleteOrg(team.id, 30, SYSTEM_AUDIT)).rejects.toMatchObject({
        status: 409,
        errorCode: 'org_has_workers',
      })
      await h.store.fleet.removeWorker(team.id, r.worker.id, 31, SYSTEM_AUDIT)
      await h.store.orgs.deleteOrg(team.id, 32, SYSTEM_AUDIT)
      expect(await h.store.orgs.findAccess(team.id, owner.id)).toBeUndefined()
      expect(await h.store.keys.findCredentialByKeyHash(`hash-${team.id}`)).toBeUndefined()
      expect((await h.store.orgs.listMembershipsOf(member.id)).map((m) => m.personal)).toEqual([true])
      const entries = (await h.store.audit.page({ actions: ['org.deleted'] }, {})).rows
      expect(entries).toEqual([
        expect.objectContaining({
          target_id: team.id,
          org_id: team.id,
          created_at: 32,
          details: {
            name: 'Lab',
            revoked_keys: [{ id: key.id, name: 'fleet', prefix: 'gk-aaaaaaaaa' }],
            members: expect.arrayContaining([
              { user_id: owner.id, role: 'owner' },
              { user_id: member.id, role: 'viewer' },
            ]),
          },
        }),
      ])
      await expect(h.store.orgs.deleteOrg(team.id, 33, SYSTEM_AUDIT)).rejects.toMatchObject({ status: 404 })

      // A deletion and a registration into the org at once: the worker is counted (409), or its
      // registration finds no org and is answered as an unknown key (401), never a 5xx.
      const raced = await h.store.orgs.createTeamOrg('Raced', owner.id, 40, SYSTEM_AUDIT)
      const [deleted, registered] = await Promise.allSettled([
        h.store.orgs.deleteOrg(raced.id, 41, SYSTEM_AUDIT),
        h.store.fleet.register(registration(raced.id)),
      ])
      if (deleted.status === 'fulfilled')
        expect(registered).toMatchObject({
          status: 'rejected',
          reason: { status: 401, errorCode: 'invalid_api_key' },
        })
      else {
        expect(deleted.reason).toMatchObject({ status: 409, errorCode: 'org_has_workers' })
        expect(registered.status).toBe('fulfilled')
      }
    })

    test('createTeamOrg, findAccess, listOrgsOf and listMembershipsOf', async () => {
      h = await open()
      const owner = await newUser(h, 'Grace')
      const stranger = await newUser(h)
      const team = await h.store.orgs.createTeamOrg('Lab', owner.id, 20, SYSTEM_AUDIT)
      expect(team).toMatchObject({ name: 'Lab', personal: false, created_at: 20 })
      expect(team.id).toStartWith('org_')
      expect(await h.store.orgs.findAccess(team.id, owner.id)).toEqual({ org: team, role: 'owner' })
      expect(await h.store.orgs.findAccess(team.id, stranger.id)).toEqual({ org: team, role: null })
      expect(await h.store.orgs.findAccess('org_nope', owner.id)).toBeUndefined()
      const [personal] = await h.store.orgs.listMembershipsOf(owner.id)
      expect(await h.store.orgs.listMembershipsOf(owner.id)).toEqual([
        { org_id: personal!.org_id, org_name: "Grace's Personal Org", role: 'owner', personal: true },
        { org_id: team.id, org_name: 'Lab', role: 'owner', personal: false },
      ])
      const page = await h.store.orgs.listOrgsOf(owner.id, { limit: '1' })
      expect(page.rows).toEqual([{ org: team, role: 'owner' }])
      expect(page.has_more).toBe(true)
      const rest = await h.store.orgs.listOrgsOf(owner.id, { after: team.id })
      expect(rest.rows.map((r) => r.org.id)).toEqual([personal!.org_id])
      expect(rest.has_more).toBe(false)
      // An org the caller is not in is no cursor.
      await expect(h.store.orgs.listOrgsOf(stranger.id, { after: team.id })).rejects.toMatchObject({
        status: 400,
        errorCode: 'invalid_cursor',
      })
    })

    test('addMember and listMembers (oldest first); a second add is 409 already_member, also when racing', async () => {
      h = await open()
      const owner = await newUser(h)
      const ann = await newUser(h, 'Ann')
      const bob = await newUser(h, 'Bob')
      const team = await h.store.orgs.createTeamOrg('Lab', owner.id, 20, SYSTEM_AUDIT)
      await h.store.orgs.addMember(team.id, bob.id, 'viewer', 30, SYSTEM_AUDIT)
      await expect(h.store.orgs.addMember(team.id, bob.id, 'admin', 31, SYSTEM_AUDIT)).rejects.toMatchObject({
        status: 409,
        errorCode: 'already_member',
      })
      const race = await settled(
        Array.from({ length: 4 }, () => h.store.orgs.addMember(team.id, ann.id, 'admin', 40, SYSTEM_AUDIT)),
      )
      expect(race.ok).toBe(1)
      expect(race.errors.map((e) => e.errorCode)).toEqual(Array(3).fill('already_member'))
      expect(await h.store.orgs.listMembers(team.id)).toEqual([
        { user_id: owner.id, role: 'owner', created_at: 20, email: owner.email, full_name: 'U' },
        { user_id: bob.id, role: 'viewer', created_at: 30, email: bob.email, full_name: 'Bob' },
        { user_id: ann.id, role: 'admin', created_at: 40, email: ann.email, full_name: 'Ann' },
      ])
    })

    test('changeMemberRole: the owner rules, then the change', async () => {
      h = await open()
      const owner = await newUser(h)
      const admin = await newUser(h, 'Adm')
      const team = await h.store.orgs.createTeamOrg('Lab', owner.id, 20, SYSTEM_AUDIT)
      await h.store.orgs.addMember(team.id, admin.id, 'viewer', 30, SYSTEM_AUDIT)
      await expect(
        h.store.orgs.changeMemberRole(team.id, 'user_nope', 'admin', 'owner', 1, SYSTEM_AUDIT),
      ).rejects.toMatchObject({
        status: 404,
        errorCode: 'member_not_found',
      })
      // Only an owner grants or removes owner.
      await expect(
        h.store.orgs.changeMemberRole(team.id, admin.id, 'owner', 'admin', 1, SYSTEM_AUDIT),
      ).rejects.toMatchObject({
        status: 403,
        errorCode: 'insufficient_role',
      })
      await expect(
        h.store.orgs.changeMemberRole(team.id, owner.id, 'viewer', 'admin', 1, SYSTEM_AUDIT),
      ).rejects.toMatchObject({
        status: 403,
      })
      await expect(
        h.store.orgs.changeMemberRole(team.id, owner.id, 'admin', 'owner', 1, SYSTEM_AUDIT),
      ).rejects.toMatchObject({
        status: 400,
        errorCode: 'last_owner',
      })
      expect(
        await h.store.orgs.changeMemberRole(team.id, admin.id, 'admin', 'admin', 1, SYSTEM_AUDIT),
      ).toEqual({
        user_id: admin.id,
        role: 'admin',
        created_at: 30,
        email: admin.email,
        full_name: 'Adm',
      })
      await h.store.orgs.changeMemberRole(team.id, admin.id, 'owner', 'owner', 1, SYSTEM_AUDIT)
      expect(
        (await h.store.orgs.changeMemberRole(team.id, owner.id, 'viewer', 'owner', 1, SYSTEM_AUDIT)).role,
      ).toBe('viewer')
      expect((await h.store.orgs.findAccess(team.id, owner.id))?.role).toBe('viewer')
    })

    test('removeMember: anyone may leave, owners and admins remove, the last owner stays', async () => {
      h = await open()
      const owner = await newUser(h)
      const admin = await newUser(h)
      const viewer = await newUser(h)
      const team = await h.store.orgs.createTeamOrg('Lab', owner.id, 20, SYSTEM_AUDIT)
      await h.store.orgs.addMember(team.id, admin.id, 'admin', 30, SYSTEM_AUDIT)
      await h.store.orgs.addMember(team.id, viewer.id, 'viewer', 30, SYSTEM_AUDIT)
      await expect(
        h.store.orgs.removeMember(team.id, 'user_nope', false, 'owner', 1, SYSTEM_AUDIT),
      ).rejects.toMatchObject({
        status: 404,
      })
      await expect(
        h.store.orgs.removeMember(team.id, owner.id, false, 'admin', 1, SYSTEM_AUDIT),
      ).rejects.toMatchObject({
        status: 403,
        errorCode: 'insufficient_role',
      })
      await expect(
        h.store.orgs.removeMember(team.id, owner.id, true, 'owner', 1, SYSTEM_AUDIT),
      ).rejects.toMatchObject({
        status: 400,
        errorCode: 'last_owner',
      })
      await h.store.orgs.removeMember(team.id, viewer.id, true, 'viewer', 1, SYSTEM_AUDIT)
      await h.store.orgs.removeMember(team.id, admin.id, false, 'owner', 1, SYSTEM_AUDIT)
      expect((await h.store.orgs.listMembers(team.id)).map((m) => m.user_id)).toEqual([owner.id])
    })

    test('two owners stepping down at once: one of them stays owner', async () => {
      h = await open()
      for (let round = 0; round < 5; round++) {
        const a = await newUser(h)
        const b = await newUser(h)
        const team = await h.store.orgs.createTeamOrg('Lab', a.id, 20, SYSTEM_AUDIT)
        await h.store.orgs.addMember(team.id, b.id, 'owner', 30, SYSTEM_AUDIT)
        const race =
          round % 2
            ? await settled([
                h.store.orgs.removeMember(team.id, a.id, true, 'owner', 1, SYSTEM_AUDIT),
                h.store.orgs.removeMember(team.id, b.id, true, 'owner', 1, SYSTEM_AUDIT),
              ])
            : await settled([
                h.store.orgs.changeMemberRole(team.id, a.id, 'viewer', 'owner', 1, SYSTEM_AUDIT),
                h.store.orgs.removeMember(team.id, b.id, false, 'owner', 1, SYSTEM_AUDIT),
              ])
        expect(race.ok).toBe(1)
        expect(race.errors.map((e) => e.errorCode)).toEqual(['last_owner'])
        const owners = (await h.store.orgs.listMembers(team.id)).filter((m) => m.role === 'owner')
        expect(owners.length).toBe(1)
      }
    })

    test('listAllOrgs: every org, newest first, with its member count', async () => {
      h = await open()
      const a = await newUser(h)
      const b = await newUser(h)
      const team = await h.store.orgs.createTeamOrg('Lab', a.id, 20, SYSTEM_AUDIT)
      await h.store.orgs.addMember(team.id, b.id, 'viewer', 30, SYSTEM_AUDIT)
      const page = await h.store.orgs.listAllOrgs({ limit: '2' })
      expect(page.rows.map((o) => [o.name, o.member_count])).toEqual([
        ['Lab', 2],
        ["U's Personal Org", 1],
      ])
      expect(page.has_more).toBe(true)
      expect((await h.store.orgs.listAllOrgs({ after: page.rows[1]!.id })).rows.length).toBe(1)
    })
  })
}
