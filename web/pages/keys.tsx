import { useState } from 'preact/hooks'
import { ErrorNote, Field, ListState, Pager, Section } from '../components/ui'
import { ApiError, client, ok } from '../lib/api'
import { formatAgo, formatTime } from '../lib/format'
import type { PageQuery } from '../lib/hooks'
import { usePaged } from '../lib/hooks'
import type { KeyRecord, NewKey } from '../lib/types'

/** The raw key, shown once (docs/api.md §3: only the creation answer carries it). */
export function ShownOnce({ created, onDismiss }: { created: NewKey; onDismiss: () => void }) {
  const [copied, setCopied] = useState<string | null>(null)
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(created.key)
      setCopied('Copied.')
    } catch {
      setCopied('Copying is not allowed here: select the key and copy it.')
    }
  }
  return (
    <div class="card shown-once" role="status" aria-label="New key">
      <p>
        Key <strong>{created.name}</strong> created. Copy it now: it is shown only once.
      </p>
      <p>
        <code class="secret">{created.key}</code>
      </p>
      <button type="button" onClick={copy}>
        Copy
      </button>{' '}
      <button type="button" onClick={onDismiss}>
        Done
      </button>
      {copied ? <span class="muted"> {copied}</span> : null}
    </div>
  )
}

/** The caller's personal keys, or an organization's worker keys: the same three calls. */
function keysOf(org: string | undefined) {
  const keys = org ? client.v1.orgs({ org_id: org })['api-keys'] : client.v1.users.me['api-keys']
  return {
    list: (query: PageQuery, signal: AbortSignal) => ok(keys.get({ query, fetch: { signal } })),
    create: async (name: string): Promise<NewKey> => {
      // The record's schema is shared with the list, where `key` is absent; the creation answer has it.
      const created = await ok(keys.post(name ? { name } : {}))
      if (!created.key) throw new ApiError(0, null, 'The server answered without the new key.')
      return { ...created, key: created.key }
    },
    revoke: (id: string) => ok(keys({ key_id: id }).delete()),
  }
}

/** Create + list + revoke, for personal keys and an organization's worker keys. */
export function KeyManager({
  org,
  createLabel,
  title,
}: {
  /** The organization's worker keys; the caller's personal keys when not given. */
  org?: string
  createLabel: string
  title: string
}) {
  const keys = keysOf(org)
  const list = usePaged(keys.list, org ?? 'personal')
  const [name, setName] = useState('')
  const [created, setCreated] = useState<NewKey | null>(null)
  const [error, setError] = useState<unknown>(null)
  const [busy, setBusy] = useState(false)
  const create = async (e: Event) => {
    e.preventDefault()
    setBusy(true)
    setError(null)
    try {
      setCreated(await keys.create(name))
      setName('')
      list.reload()
    } catch (err) {
      setError(err)
    } finally {
      setBusy(false)
    }
  }
  const revoke = async (k: KeyRecord) => {
    setError(null)
    try {
      await keys.revoke(k.id)
      list.reload()
    } catch (err) {
      setError(err)
    }
  }
  const nameError = error instanceof ApiError && error.param === 'name' ? error.message : null
  return (
    <Section title={title}>
      {created ? <ShownOnce created={created} onDismiss={() => setCreated(null)} /> : null}
      <form class="inline-form" onSubmit={create} aria-label={createLabel}>
        <Field
          label="Name"
          value={name}
          maxLength={200}
          error={nameError}
          onInput={(e) => setName(e.currentTarget.value)}
        />
        <button type="submit" disabled={busy}>
          {createLabel}
        </button>
      </form>
      {nameError ? null : <ErrorNote error={error} />}
      <ListState res={list} empty="No key yet." />
      {list.data?.data.length ? (
        <table aria-label={title}>
          <thead>
            <tr>
              <th>Name</th>
              <th>Prefix</th>
              <th>Created</th>
              <th>Last used</th>
              <th>State</th>
              <th>
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {list.data.data.map((k) => (
              <tr key={k.id}>
                <td>{k.name}</td>
                <td>
                  <code>{k.prefix}…</code>
                </td>
                <td>{formatTime(k.created_at)}</td>
                <td>{formatAgo(k.last_used_at, Date.now() / 1000)}</td>
                <td>{k.revoked_at ? `revoked ${formatTime(k.revoked_at)}` : 'active'}</td>
                <td>
                  {k.revoked_at ? null : (
                    <button type="button" onClick={() => revoke(k)}>
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <Pager list={list} label={title} />
    </Section>
  )
}

export function Keys() {
  return (
    <>
      <KeyManager createLabel="Create key" title="Personal keys" />
      <p class="muted">
        Personal keys are for scripts and the openai SDK. Worker keys, for the GPU machines, are on each
        organization's page under <a href="/app/orgs">Organizations</a>.
      </p>
    </>
  )
}
