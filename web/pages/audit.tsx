import { useId, useState } from 'preact/hooks'
import { AUDIT_ACTION_NAMES } from '../../src/domain/audit'
import { ErrorNote, Field, ListState, Pager, Section } from '../components/ui'
import { ApiError, client, download, ok } from '../lib/api'
import { formatTime } from '../lib/format'
import { usePaged } from '../lib/hooks'
import type { AuditEvent, List, Me } from '../lib/types'

// The audit log (docs/api.md §17, §11): who did what, when, from where. A superadmin reads every
// entry; an organization's owners and admins read their organization's. The filters are the API's
// own, applied together with "Apply filters"; "Download JSONL" exports every entry they match.

/** Every action, each after its families (`key.*`, `key.personal.*`): what the filter offers. */
const ACTIONS = AUDIT_ACTION_NAMES.flatMap((action) => {
  const parts = action.split('.')
  return [...parts.slice(1).map((_, i) => `${parts.slice(0, i + 1).join('.')}.*`), action]
}).filter((a, i, all) => all.indexOf(a) === i)

const DAY = 86_400

interface Filters {
  actor: string
  action: string
  target_id: string
  org_id: string
  /** Local dates, "2026-11-23". */
  from: string
  to: string
}
const NONE: Filters = { actor: '', action: '', target_id: '', org_id: '', from: '', to: '' }

/** A local date's first second, in Unix seconds. */
const dayStart = (date: string) => {
  const ms = new Date(`${date}T00:00:00`).getTime()
  return Number.isNaN(ms) ? null : ms / 1000
}

/** The query the filters ask for: empty ones left out, the "To" day included whole. */
function queryOf(f: Filters): Record<string, string> {
  const q: Record<string, string> = {}
  for (const k of ['actor', 'action', 'target_id', 'org_id'] as const) if (f[k].trim()) q[k] = f[k].trim()
  const start = f.from ? dayStart(f.from) : null
  const end = f.to ? dayStart(f.to) : null
  if (start !== null) q.start = String(start)
  if (end !== null) q.end = String(end + DAY)
  return q
}

/** The orgs whose entries the caller may read: every one for a superadmin, else owned or administered. */
export const auditOrgs = (me: Me) =>
  me.memberships.filter((m) => me.platform_role === 'superadmin' || m.role === 'owner' || m.role === 'admin')

/**
 * Whether the navigation offers the page (docs/api.md §11): to everyone who may read an entry
 * (§17), superadmins and the owners and admins of any organization. Everyone owns their Personal
 * Org, whose worker keys and workers are theirs to audit, so every user gets it.
 */
export const readsAudit = (me: Me) => me.platform_role === 'superadmin' || auditOrgs(me).length > 0

const errorFor = (error: unknown, param: string) =>
  error instanceof ApiError && error.param === param ? error.message : null

export function Audit({ me }: { me: Me }) {
  const [draft, setDraft] = useState<Filters>(NONE)
  const [applied, setApplied] = useState<Filters>(NONE)
  const [exportError, setExportError] = useState<unknown>(null)
  const query = queryOf(applied)
  const list = usePaged(
    (page, signal) =>
      ok(client.v1['audit-events'].get({ query: { ...query, ...page }, fetch: { signal } })) as Promise<
        List<AuditEvent>
      >,
    `audit ${new URLSearchParams(query)}`,
  )
  const orgField = useId()
  const actionField = useId()
  const set = (k: keyof Filters) => (e: { currentTarget: { value: string } }) =>
    setDraft({ ...draft, [k]: e.currentTarget.value })
  const named = ['actor', 'action', 'target_id', 'org_id', 'start', 'end'].some((p) =>
    errorFor(list.error, p),
  )

  const exportAll = async () => {
    setExportError(null)
    try {
      await download(`/v1/audit-events?${new URLSearchParams({ ...query, format: 'jsonl' })}`, 'audit.jsonl')
    } catch (err) {
      setExportError(err)
    }
  }

  return (
    <Section
      title="Audit"
      actions={
        <button type="button" onClick={exportAll}>
          Download JSONL
        </button>
      }
    >
      {me.platform_role === 'superadmin' ? (
        <p class="muted">
          Who did what, when and from where: sign-ins, passwords, keys, members, users, the catalogue, deleted
          files. Entries are never changed; they are kept for the server's AUDIT_RETENTION_DAYS.
        </p>
      ) : (
        <p class="muted">
          Who did what, when and from where, in the organizations you own or administer (your Personal Org
          included): their worker keys, members and workers. Sign-ins, accounts, personal keys, the catalogue
          and files are read by superadmins. Entries are never changed.
        </p>
      )}
      <form
        class="inline-form"
        aria-label="Audit filters"
        onSubmit={(e) => {
          e.preventDefault()
          setApplied(draft)
        }}
      >
        <Field
          label="Actor"
          placeholder="user_…, key_…, system"
          value={draft.actor}
          error={errorFor(list.error, 'actor')}
          onInput={set('actor')}
        />
        <div class="field">
          <label for={actionField}>Action</label>
          <select id={actionField} value={draft.action} onChange={set('action')}>
            <option value="">Any action</option>
            {ACTIONS.map((a) => (
              <option key={a} value={a}>
                {a}
              </option>
            ))}
          </select>
        </div>
        <Field
          label="Target"
          placeholder="an id"
          value={draft.target_id}
          error={errorFor(list.error, 'target_id')}
          onInput={set('target_id')}
        />
        <div class="field">
          <label for={orgField}>Organization</label>
          <select id={orgField} value={draft.org_id} onChange={set('org_id')}>
            <option value="">{me.platform_role === 'superadmin' ? 'Any' : 'Any of mine'}</option>
            {auditOrgs(me).map((m) => (
              <option key={m.org_id} value={m.org_id}>
                {m.org_name}
              </option>
            ))}
          </select>
        </div>
        <Field
          label="From"
          type="date"
          value={draft.from}
          error={errorFor(list.error, 'start')}
          onInput={set('from')}
        />
        <Field
          label="To"
          type="date"
          value={draft.to}
          error={errorFor(list.error, 'end')}
          onInput={set('to')}
        />
        <button type="submit">Apply filters</button>
      </form>
      <ErrorNote error={exportError} />
      {named ? null : <ListState res={list} empty="No entry matches." />}
      {list.data?.data.length ? <AuditTable events={list.data.data} /> : null}
      <Pager list={list} label="Audit events" />
    </Section>
  )
}

const actorOf = (e: AuditEvent) =>
  e.actor.kind === 'personal_key'
    ? `${e.actor.id} (personal key of ${e.actor.user_id})`
    : e.actor.kind === 'worker_key'
      ? `${e.actor.id} (worker key)`
      : (e.actor.id ?? e.actor.kind)

function AuditTable({ events }: { events: AuditEvent[] }) {
  return (
    <div class="table-scroll">
      <table class="audit" aria-label="Audit events">
        <thead>
          <tr>
            <th>Time</th>
            <th>Action</th>
            <th>Actor</th>
            <th>Target</th>
            <th>Organization</th>
            <th>From</th>
            <th>Details</th>
          </tr>
        </thead>
        <tbody>
          {events.map((e) => (
            <tr key={e.id}>
              <td>{formatTime(e.created_at)}</td>
              <td>
                <code>{e.action}</code>
              </td>
              <td>{actorOf(e)}</td>
              <td>{e.target.id ? `${e.target.kind} ${e.target.id}` : e.target.kind}</td>
              <td>{e.org_id ?? '—'}</td>
              <td title={e.user_agent ?? undefined}>{e.ip ?? '—'}</td>
              <td>
                <code class="details">
                  {Object.entries(e.details)
                    .map(([k, v]) => `${k}: ${JSON.stringify(v)}`)
                    .join('\n')}
                </code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  )
}
