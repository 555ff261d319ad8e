import { useState } from 'preact/hooks'
import { ConfirmAction, ErrorNote, Field, ListState, Section } from '../components/ui'
import { ApiError, client, ok } from '../lib/api'
import { formatTime } from '../lib/format'
import { usePaged, useResource } from '../lib/hooks'
import { navigate } from '../lib/router'
import type { Org } from '../lib/types'
import { KeyManager } from './keys'
import { WorkerTable } from './workers'

const ROLES = ['owner', 'admin', 'viewer'] as const
type Role = (typeof ROLES)[number]

export function Orgs() {
  const list = usePaged((query, signal) => ok(client.v1.orgs.get({ query, fetch: { signal } })), 'orgs')
  const [name, setName] = useState('')
  const [error, setError] = useState<unknown>(null)
  const create = async (e: Event) => {
    e.preventDefault()
    setError(null)
    try {
      await ok(client.v1.orgs.post({ name }))
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
  const orgs = useResource(
    (signal) => ok(client.v1.orgs.get({ query: { limit: '100' }, fetch: { signal } })),
    'orgs',
  )
  const org = orgs.data?.data.find((o) => o.id === id)
  if (!orgs.data) return orgs.error ? <ErrorNote error={orgs.error} /> : <p class="muted">Loading…</p>
  if (!org) return <p class="error">No such organization, or you are not a member.</p>
  const manages = org.role === 'owner' || org.role === 'admin'
  return (
    <>
      <h2>{org.name}</h2>
      <Members org={org} manages={manages} />
      {manages ? <KeyManager org={org.id} createLabel="Create worker key" title="Worker keys" /> : null}
      <Section title="Workers">
        <WorkerTable org={org.id} label={`Workers of ${org.name}`} manages={manages} />
      </Section>
      {org.role === 'owner' && !org.personal ? (
        <Section title="Delete organization">
          <p class="muted">Its worker keys stop working and its members lose it. Remove its workers first.</p>
          <ConfirmAction
            label="Delete organization"
            name={`Delete organization ${org.name}`}
            question={`Delete ${org.name}? This cannot be undone.`}
            confirm="Confirm deletion"
            run={async () => {
              await ok(client.v1.orgs({ org_id: org.id }).delete())
              navigate('/app/orgs')
            }}
          />
        </Section>
      ) : null}
    </>
  )
}

function Members({ org, manages }: { org: Org; manages: boolean }) {
  const members = useResource(
    (signal) => ok(client.v1.orgs({ org_id: org.id }).members.get({ fetch: { signal } })),
    org.id,
  )
  const [email, setEmail] = useState('')
  const [role, setRole] = useState<Role>('viewer')
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
      await ok(client.v1.orgs({ org_id: org.id }).members.post({ email, role }))
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
                          ok(
                            client.v1
                              .orgs({ org_id: org.id })
                              .members({ user_id: m.user_id })
                              .patch({ role: e.currentTarget.value as Role }),
                          ),
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
                        onClick={() =>
                          act(() =>
                            ok(client.v1.orgs({ org_id: org.id }).members({ user_id: m.user_id }).delete()),
                          )
                        }
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
            <select value={role} onChange={(e) => setRole(e.currentTarget.value as Role)}>
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
