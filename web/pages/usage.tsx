import { useId, useState } from 'preact/hooks'
import { ErrorNote, Field, Section } from '../components/ui'
import { UsageChart } from '../components/usage-chart'
import { ApiError, client, ok, saveFile } from '../lib/api'
import { formatCount, toCsv } from '../lib/format'
import { useResource } from '../lib/hooks'
import type { Me, UsageList, UsageRow } from '../lib/types'

// Usage (docs/api.md §14, §11): the caller's own; an organization's for its owners and admins (the
// work its workers ran); everyone's for a superadmin. Days are UTC days, as the API counts them.
// Until a range is picked, the server's default range is shown (the last 30 days by its clock).

type Group = 'day' | 'model' | 'key' | 'user'

interface View {
  id: string
  label: string
  /** One usage list of this view, typed by its route. */
  load: (query: UsageQuery, signal: AbortSignal) => Promise<UsageList>
  groups: Group[]
}

/** The query of the three usage routes (the server takes times as strings, docs/api.md §14). */
interface UsageQuery {
  group_by: Group
  start?: string
  end?: string
}

const DAY = 86_400
const GROUP_NAMES: Record<Group, string> = { day: 'Day', model: 'Model', key: 'Key', user: 'User' }
const COUNTS = [
  'batches',
  'requests',
  'prompt_tokens',
  'cached_tokens',
  'completion_tokens',
  'total_tokens',
] as const
const COUNT_NAMES = [
  'Batches',
  'Requests',
  'Prompt tokens',
  // docs/api.md §14: of the prompt tokens, those the engines served from their cache.
  'Cached prompt tokens',
  'Completion tokens',
  'Total tokens',
]

function viewsOf(me: Me): View[] {
  const superadmin = me.platform_role === 'superadmin'
  const views: View[] = [
    {
      id: 'me',
      label: 'My usage',
      load: (query, signal) => ok(client.v1.usage.get({ query, fetch: { signal } })),
      groups: ['day', 'model', 'key'],
    },
  ]
  for (const m of me.memberships) {
    if (m.role === 'owner' || m.role === 'admin' || superadmin)
      views.push({
        id: m.org_id,
        label: `Organization: ${m.org_name}`,
        load: (query, signal) =>
          ok(client.v1.orgs({ org_id: m.org_id }).usage.get({ query, fetch: { signal } })),
        groups: ['day', 'model'],
      })
  }
  if (superadmin)
    views.push({
      id: 'all',
      label: 'Everyone',
      load: (query, signal) => ok(client.v1.admin.usage.get({ query, fetch: { signal } })),
      groups: ['day', 'model', 'key', 'user'],
    })
  return views
}

/** Unix seconds → "2026-11-23" (the UTC day). */
const utcDate = (seconds: number) => new Date(seconds * 1000).toISOString().slice(0, 10)
/** "2026-11-23" → the start of that UTC day, in Unix seconds; null when not a date. */
function fromUtcDate(value: string): number | null {
  const ms = Date.parse(`${value}T00:00:00Z`)
  return Number.isNaN(ms) ? null : ms / 1000
}

/** What a row is: its day, model, key or user. */
function rowName(row: UsageRow, group: Group): string {
  if (group === 'day') return utcDate(row.start)
  if (group === 'model') return row.model ?? '—'
  if (group === 'user') return row.email ?? row.user_id ?? '—'
  return row.key_name ? `${row.key_prefix} (${row.key_name})` : (row.key_prefix ?? '—')
}

function usageCsv(rows: UsageRow[], group: Group): string {
  const head = ['start', 'end', ...(group === 'day' ? [] : [group]), ...COUNTS]
  const lines = rows.map((r) => [
    new Date(r.start * 1000).toISOString(),
    new Date(r.end * 1000).toISOString(),
    ...(group === 'day' ? [] : [rowName(r, group)]),
    ...COUNTS.map((k) => r[k]),
  ])
  return toCsv([head, ...lines])
}

/** The error that belongs to a control (the API names it in `param`). */
const errorFor = (error: unknown, param: string) =>
  error instanceof ApiError && error.param === param ? error.message : null

export function Usage({ me }: { me: Me }) {
  const views = viewsOf(me)
  const [viewId, setViewId] = useState('me')
  const view = views.find((v) => v.id === viewId) ?? views[0]!
  const [picked, setPicked] = useState<{ start?: number; end?: number }>({})
  const [chosen, setGroup] = useState<Group>('day')
  const group = view.groups.includes(chosen) ? chosen : 'day'
  const ask = (groupBy: Group): UsageQuery => ({
    group_by: groupBy,
    ...(picked.start === undefined ? {} : { start: String(picked.start) }),
    ...(picked.end === undefined ? {} : { end: String(picked.end) }),
  })
  const key = `${view.id} ${picked.start ?? ''} ${picked.end ?? ''} ${group}`
  const usage = useResource(async (signal) => {
    const [days, rows] = await Promise.all([
      view.load(ask('day'), signal),
      group === 'day' ? null : view.load(ask(group), signal),
    ])
    return { days: days.data, rows: (rows ?? days).data }
  }, key)

  // The range shown: the one picked, else the one the server answered for.
  const days = usage.data?.days
  const start = picked.start ?? days?.[0]?.start
  const end = picked.end ?? days?.at(-1)?.end
  const general =
    usage.error && !['start', 'end', 'group_by'].some((p) => errorFor(usage.error, p)) ? usage.error : null
  const viewField = useId()
  const groupField = useId()

  const download = () => {
    if (!usage.data || start === undefined || end === undefined) return
    const name = `usage-${view.id}-${utcDate(start)}-${utcDate(end - 1)}-by-${group}.csv`
    saveFile(name, new Blob([usageCsv(usage.data.rows, group)], { type: 'text/csv' }))
  }

  return (
    <Section
      title="Usage"
      actions={
        <button type="button" onClick={download} disabled={!usage.data}>
          Download CSV
        </button>
      }
    >
      <p class="muted">
        Tokens and requests of completed batches, from the workers’ reports. Days are UTC days.
      </p>
      <form class="inline-form" aria-label="Usage range" onSubmit={(e) => e.preventDefault()}>
        {views.length > 1 ? (
          <div class="field">
            <label for={viewField}>View</label>
            <select id={viewField} value={view.id} onChange={(e) => setViewId(e.currentTarget.value)}>
              {views.map((v) => (
                <option key={v.id} value={v.id}>
                  {v.label}
                </option>
              ))}
            </select>
          </div>
        ) : null}
        <Field
          label="From"
          type="date"
          value={start === undefined ? '' : utcDate(start)}
          error={errorFor(usage.error, 'start')}
          onChange={(e) =>
            setPicked({ start: fromUtcDate(e.currentTarget.value) ?? undefined, end: picked.end ?? end })
          }
        />
        <Field
          label="To"
          type="date"
          value={end === undefined ? '' : utcDate(end - 1)}
          error={errorFor(usage.error, 'end')}
          onChange={(e) => {
            const day = fromUtcDate(e.currentTarget.value)
            setPicked({ start: picked.start ?? start, end: day === null ? undefined : day + DAY })
          }}
        />
        <div class="field">
          <label for={groupField}>Group by</label>
          <select
            id={groupField}
            value={group}
            onChange={(e) => setGroup(e.currentTarget.value as Group)}
            aria-invalid={errorFor(usage.error, 'group_by') ? true : undefined}
          >
            {view.groups.map((g) => (
              <option key={g} value={g}>
                {GROUP_NAMES[g]}
              </option>
            ))}
          </select>
          {errorFor(usage.error, 'group_by') ? (
            <p class="error" role="alert">
              {errorFor(usage.error, 'group_by')}
            </p>
          ) : null}
        </div>
      </form>
      <ErrorNote error={general} />
      {!usage.data && usage.loading ? <p class="muted">Loading…</p> : null}
      {usage.data ? (
        <>
          <UsageChart days={usage.data.days} />
          <UsageTable rows={usage.data.rows} group={group} />
        </>
      ) : null}
    </Section>
  )
}

function UsageTable({ rows, group }: { rows: UsageRow[]; group: Group }) {
  // Every day is in the chart (and the CSV); the table lists the days that had work.
  const shown = group === 'day' ? rows.filter((r) => r.batches > 0) : rows
  if (shown.length === 0) return <p class="muted">No completed batch in this range.</p>
  const total = (k: (typeof COUNTS)[number]) => rows.reduce((n, r) => n + r[k], 0)
  return (
    <table aria-label="Usage">
      <thead>
        <tr>
          <th>{GROUP_NAMES[group]}</th>
          {COUNT_NAMES.map((name) => (
            <th key={name} class="num">
              {name}
            </th>
          ))}
        </tr>
      </thead>
      <tbody>
        {shown.map((r) => (
          <tr key={`${r.start}-${rowName(r, group)}`}>
            <td>
              {group === 'day' || group === 'user' ? rowName(r, group) : <code>{rowName(r, group)}</code>}
            </td>
            {COUNTS.map((k) => (
              <td key={k} class="num">
                {formatCount(r[k])}
              </td>
            ))}
          </tr>
        ))}
      </tbody>
      <tfoot>
        <tr>
          <th scope="row">Total</th>
          {COUNTS.map((k) => (
            <td key={k} class="num">
              {formatCount(total(k))}
            </td>
          ))}
        </tr>
      </tfoot>
    </table>
  )
}
