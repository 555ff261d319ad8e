import { useState } from 'preact/hooks'
import { ErrorNote, Field, ListState, Section } from '../components/ui'
import { ApiError, api } from '../lib/api'
import { formatTime } from '../lib/format'
import { usePaged, useResource } from '../lib/hooks'
import type { List, Member, Org } from '../lib/types'
import { KeyManager } from './keys'
import { WorkerTable } from './workers'

const ROLES = ['owner', 'admin', 'viewer']

export function Orgs() {
  const list = usePaged<Org>('/v1/orgs')
  const [name, setName] = useState('')
  const [error, setError] = useState<unknown>(null)
  const create = async (e: Event) => {
    e.preventDefault()
    setError(null)
    try {
      await api.post('/v1/orgs', { name })
      setName('')
      list.reload()
    } catch (err) {
      setError(err)
    }
  }
  const nameError = error instanceof ApiError && error.param === 'name' ? error.message : null
  return (
    <Section title="Organizations">
      <ListState res={list} empty="No organization." />
      {list.data?.data.length ? (
        <table>
          <thead>
            <tr>
              <th>Organization</th>
              <th>Your role</th>
              <th>Kind</th>
              <th>Created</th>
            </tr>
          </thead>
          <tbody>
            {list.data.data.map((o) => (
              <tr key={o.id}>
                <td>
                  <a href={`/app/orgs/${o.id}`}>{o.name}</a>
                </td>
                <td>{o.role}</td>
                <td>{o.personal ? 'personal' : 'team'}</td>
                <td>{formatTime(o.created_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <form class="inline-form" onSubmit={create} aria-label="New organization">
        <Field
          label="Organization name"
          required
          value={name}
          error={nameError}
          onInput={(e) => setName(e.currentTarget.value)}
        />
        <button type="submit">Create organization</button>
      </form>
      {nameError ? null : <ErrorNote error={error} />}
    </Section>
  )
}

export function OrgDetail({ id }: { id: string }) {
  // There is no single-org route: the org comes from the caller's own list.
  const orgs = useResource((signal) => api.get<List<Org>>('/v1/orgs?limit=100', { signal }), 'orgs')
  const org = orgs.data?.data.find((o) => o.id === id)
  if (!orgs.data) return orgs.error ? <ErrorNote error={orgs.error} /> : <p class="muted">Loading…</p>
  if (!org) return <p class="error">No such organization, or you are not a member.</p>
  const manages = org.role === 'owner' || org.role === 'admin'
  return (
    <>
      <h2>{org.name}</h2>
      <Members org={org} manages={manages} />
      {manages ? (
        <KeyManager
          path={`/v1/orgs/${org.id}/api-keys`}
          createLabel="Create worker key"
          title="Worker keys"
        />
      ) : null}
      <Section title="Workers">
        <WorkerTable path={`/v1/orgs/${org.id}/workers`} label={`Workers of ${org.name}`} />
      </Section>
    </>
  )
}

function Members({ org, manages }: { org: Org; manages: boolean }) {
  const members = useResource(
    (signal) => api.get<List<Member>>(`/v1/orgs/${org.id}/members`, { signal }),
    org.id,
  )
  const [email, setEmail] = useState('')
  const [role, setRole] = useState('viewer')
  const [error, setError] = useState<unknown>(null)
  const act = async (fn: () => Promise<unknown>) => {
    setError(null)
    try {
      await fn()
      members.reload()
    } catch (err) {
      setError(err)
    }
  }
  const add = (e: Event) => {
    e.preventDefault()
    void act(async () => {
      await api.post(`/v1/orgs/${org.id}/members`, { email, role })
      setEmail('')
    })
  }
  const emailError = error instanceof ApiError && error.param === 'email' ? error.message : null
  return (
    <Section title="Members">
      {emailError ? null : <ErrorNote error={error} />}
      <ListState res={members} empty="No member." />
      {members.data?.data.length ? (
        <table aria-label="Members">
          <thead>
            <tr>
              <th>Name</th>
              <th>Email</th>
              <th>Role</th>
              {manages ? (
                <th>
                  <span class="sr-only">Actions</span>
                </th>
              ) : null}
            </tr>
          </thead>
          <tbody>
            {members.data.data.map((m) => (
              <tr key={m.user_id}>
                <td>{m.full_name}</td>
                <td>{m.email}</td>
                <td>
                  {manages && !org.personal ? (
                    <select
                      aria-label={`Role of ${m.email}`}
                      value={m.role}
                      onChange={(e) =>
                        act(() =>
                          api.patch(`/v1/orgs/${org.id}/members/${m.user_id}`, {
                            role: e.currentTarget.value,
                          }),
                        )
                      }
                    >
                      {ROLES.map((r) => (
                        <option key={r}>{r}</option>
                      ))}
                    </select>
                  ) : (
                    m.role
                  )}
                </td>
                {manages ? (
                  <td>
                    {org.personal ? null : (
                      <button
                        type="button"
                        onClick={() => act(() => api.delete(`/v1/orgs/${org.id}/members/${m.user_id}`))}
                      >
                        Remove
                      </button>
                    )}
                  </td>
                ) : null}
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      {manages && !org.personal ? (
        <form class="inline-form" onSubmit={add} aria-label="Add member">
          <Field
            label="Member email"
            type="email"
            required
            value={email}
            error={emailError}
            onInput={(e) => setEmail(e.currentTarget.value)}
          />
          <label class="inline">
            Role{' '}
            <select value={role} onChange={(e) => setRole(e.currentTarget.value)}>
              {ROLES.map((r) => (
                <option key={r}>{r}</option>
              ))}
            </select>
          </label>
          <button type="submit">Add member</button>
        </form>
      ) : org.personal ? (
        <p class="muted">
          A personal organization has only you. Create a team organization to share workers.
        </p>
      ) : null}
    </Section>
  )
}
