import { useState } from 'preact/hooks'
import { ErrorNote, ListState, Pager, Section } from '../components/ui'
import { api } from '../lib/api'
import { formatTime } from '../lib/format'
import { usePaged } from '../lib/hooks'
import type { AdminOrg, UserObject } from '../lib/types'
import { WorkerTable } from './workers'

export function Admin() {
  return (
    <>
      <Users />
      <Organizations />
      <Section title="Every worker">
        <WorkerTable path="/v1/admin/workers" label="Every worker" showOrg />
      </Section>
    </>
  )
}

function Users() {
  const list = usePaged<UserObject>('/v1/admin/users')
  const [error, setError] = useState<unknown>(null)
  const update = async (u: UserObject, change: { is_active?: boolean; platform_role?: string }) => {
    setError(null)
    try {
      await api.patch(`/v1/admin/users/${u.id}`, change)
      list.reload()
    } catch (err) {
      setError(err)
    }
  }
  return (
    <Section title="Users">
      <ErrorNote error={error} />
      <ListState res={list} empty="No user." />
      {list.data?.data.length ? (
        <table aria-label="Users">
          <thead>
            <tr>
              <th>Name</th>
              <th>Email</th>
              <th>Role</th>
              <th>State</th>
              <th>Created</th>
              <th>
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {list.data.data.map((u) => (
              <tr key={u.id}>
                <td>{u.full_name}</td>
                <td>{u.email}</td>
                <td>
                  <select
                    aria-label={`Role of ${u.email}`}
                    value={u.platform_role}
                    onChange={(e) => update(u, { platform_role: e.currentTarget.value })}
                  >
                    <option value="user">user</option>
                    <option value="superadmin">superadmin</option>
                  </select>
                </td>
                <td>{u.is_active ? 'active' : 'deactivated'}</td>
                <td>{formatTime(u.created_at)}</td>
                <td>
                  <button type="button" onClick={() => update(u, { is_active: !u.is_active })}>
                    {u.is_active ? 'Deactivate' : 'Activate'}
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <Pager list={list} label="Users" />
    </Section>
  )
}

function Organizations() {
  const list = usePaged<AdminOrg>('/v1/admin/organizations')
  return (
    <Section title="All organizations">
      <ListState res={list} empty="No organization." />
      {list.data?.data.length ? (
        <table aria-label="All organizations">
          <thead>
            <tr>
              <th>Organization</th>
              <th>Id</th>
              <th>Kind</th>
              <th>Members</th>
              <th>Created</th>
            </tr>
          </thead>
          <tbody>
            {list.data.data.map((o) => (
              <tr key={o.id}>
                <td>{o.name}</td>
                <td>
                  <code>{o.id}</code>
                </td>
                <td>{o.personal ? 'personal' : 'team'}</td>
                <td>{o.member_count}</td>
                <td>{formatTime(o.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <Pager list={list} label="All organizations" />
    </Section>
  )
}
