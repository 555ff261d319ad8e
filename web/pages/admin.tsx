import { useState } from 'preact/hooks'
import { ErrorNote, Field, ListState, Pager, Section } from '../components/ui'
import { ApiError, anonymousClient, client, ok } from '../lib/api'
import { formatTime } from '../lib/format'
import { usePaged, useResource } from '../lib/hooks'
import type { UserObject } from '../lib/types'
import { WorkerTable } from './workers'

export function Admin() {
  return (
    <>
      <Users />
      <Organizations />
      <Section title="Every worker">
        <WorkerTable label="Every worker" showOrg />
      </Section>
    </>
  )
}

/** The body of PATCH /v1/admin/users/{user_id}, as the route declares it. */
type UserChange = Parameters<ReturnType<typeof client.v1.admin.users>['patch']>[0]

function Users() {
  const list = usePaged(
    (query, signal) => ok(client.v1.admin.users.get({ query, fetch: { signal } })),
    'users',
  )
  const [error, setError] = useState<unknown>(null)
  const update = async (u: UserObject, change: UserChange) => {
    setError(null)
    try {
      await ok(client.v1.admin.users({ user_id: u.id }).patch(change))
      list.reload()
    } catch (err) {
      setError(err)
    }
  }
  return (
    <Section title="Users">
      <AddUser onAdded={list.reload} />
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
                    onChange={(e) =>
                      update(u, { platform_role: e.currentTarget.value as UserObject['platform_role'] })
                    }
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

/**
 * docs/api.md §9 (ext): the new user must change this password at first sign-in; with passwords
 * off (PASSWORD_LOGIN=false) there is none, and they sign in by single sign-on.
 */
function AddUser({ onAdded }: { onAdded: () => void }) {
  const methods = useResource(
    (signal) => ok(anonymousClient.v1.auth.methods.get({ fetch: { signal } })),
    'auth-methods',
  )
  const passwords = methods.data?.password ?? true
  const [fullName, setFullName] = useState('')
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const [error, setError] = useState<unknown>(null)
  const [added, setAdded] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const submit = async (e: Event) => {
    e.preventDefault()
    setBusy(true)
    setError(null)
    setAdded(null)
    try {
      await ok(client.v1.admin.users.post({ full_name: fullName, email, ...(passwords ? { password } : {}) }))
      setAdded(email)
      setFullName('')
      setEmail('')
      setPassword('')
      onAdded()
    } catch (err) {
      setError(err)
    } finally {
      setBusy(false)
    }
  }
  const at = (param: string) => (error instanceof ApiError && error.param === param ? error.message : null)
  const named = at('full_name') || at('email') || at('password')
  return (
    <form class="inline-form" onSubmit={submit} aria-label="Add user">
      <Field
        label="Full name"
        required
        value={fullName}
        error={at('full_name')}
        onInput={(e) => setFullName(e.currentTarget.value)}
      />
      <Field
        label="Email"
        type="email"
        required
        value={email}
        error={at('email')}
        onInput={(e) => setEmail(e.currentTarget.value)}
      />
      {passwords ? (
        <Field
          label="First password"
          type="password"
          autocomplete="new-password"
          required
          value={password}
          error={at('password')}
          onInput={(e) => setPassword(e.currentTarget.value)}
        />
      ) : null}
      <button type="submit" disabled={busy}>
        Add user
      </button>
      {named ? null : <ErrorNote error={error} />}
      {added ? (
        <p role="status" class="notice">
          {added} added:{' '}
          {passwords
            ? 'they choose their own password at first sign-in.'
            : `they sign in with ${methods.data?.sso?.name ?? 'single sign-on'}.`}
        </p>
      ) : null}
    </form>
  )
}

function Organizations() {
  const list = usePaged(
    (query, signal) => ok(client.v1.admin.organizations.get({ query, fetch: { signal } })),
    'orgs',
  )
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
