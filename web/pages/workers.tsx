import { QueueChart } from '../components/queue-chart'
import { ConfirmAction, ErrorNote, ListState, Pager, Section, Status } from '../components/ui'
import { client, ok, poolCapacity } from '../lib/api'
import { formatAgo, formatCount, formatModelState, formatTime, formatVram, vramShare } from '../lib/format'
import { usePaged, useResource } from '../lib/hooks'

/** docs/api.md §11 "refreshed without reload at least every 5 s". */
export const LIVE_MS = 5000

export function Workers() {
  const orgs = useResource(
    (signal) => ok(client.v1.orgs.get({ query: { limit: '100' }, fetch: { signal } })),
    'orgs',
  )
  return (
    <>
      <PoolPanel />
      {orgs.error ? <ErrorNote error={orgs.error} /> : null}
      {orgs.data?.data.map((o) => (
        <Section key={o.id} title={`Workers of ${o.name}`}>
          <WorkerTable
            org={o.id}
            label={`Workers of ${o.name}`}
            manages={o.role === 'owner' || o.role === 'admin'}
          />
        </Section>
      ))}
    </>
  )
}

export function PoolPanel() {
  const pool = useResource((signal) => poolCapacity(false, signal), 'pool', LIVE_MS)
  const stats = useResource(
    (signal) => ok(client.v1.stats.queue.get({ fetch: { signal } })),
    'stats',
    LIVE_MS,
  )
  const p = pool.data
  const s = stats.data
  return (
    <Section title="Pool">
      <ErrorNote error={pool.error ?? stats.error} />
      <dl class="figures">
        <Figure label="Workers online" value={p?.workers_online} />
        <Figure label="Idle" value={p?.workers_idle} />
        <Figure label="Busy" value={p?.workers_busy} />
        <Figure label="GPUs" value={p?.gpus_online} />
        <Figure label="Models servable" value={p?.models_servable.length} />
        <Figure label="Batches waiting" value={s ? s.validating + s.validated : undefined} />
        <Figure label="Batches running" value={s?.in_progress} />
      </dl>
      {s ? <QueueChart stats={s} /> : null}
    </Section>
  )
}

function Figure({ label, value }: { label: string; value: number | null | undefined }) {
  return (
    <div>
      <dt>{label}</dt>
      <dd>{value === undefined ? '…' : value === null ? '—' : formatCount(value)}</dd>
    </div>
  )
}

/** One page of workers at a time (a fleet of thousands stays one request per page). */
export function WorkerTable({
  org,
  label,
  showOrg = false,
  manages = false,
}: {
  /** The organization's workers; every worker (superadmin) when not given. */
  org?: string
  label: string
  showOrg?: boolean
  /** The caller owns or administers `org`: each row has "Remove" (docs/api.md §3). */
  manages?: boolean
}) {
  const list = usePaged(
    (query, signal) =>
      org
        ? ok(client.v1.orgs({ org_id: org }).workers.get({ query, fetch: { signal } }))
        : ok(client.v1.admin.workers.get({ query, fetch: { signal } })),
    org ?? 'all',
    LIVE_MS,
    50,
  )
  const now = Date.now() / 1000
  return (
    <>
      <ListState
        res={list}
        empty="No worker has registered. Start a daemon with a worker key of this organization."
      />
      {list.data?.data.length ? (
        <table aria-label={label}>
          <thead>
            <tr>
              <th>Name</th>
              {showOrg ? <th>Organization</th> : null}
              <th>Status</th>
              <th>Activity</th>
              <th>Concurrency</th>
              <th>VRAM</th>
              <th>GPUs</th>
              <th>Models</th>
              <th>Current batch</th>
              <th>Last heartbeat</th>
              {org && manages ? (
                <th>
                  <span class="sr-only">Actions</span>
                </th>
              ) : null}
            </tr>
          </thead>
          <tbody>
            {list.data.data.map((w) => (
              <tr key={w.id}>
                <td>
                  {w.name}
                  <br />
                  <small class="muted">{w.hostname}</small>
                </td>
                {showOrg ? (
                  <td>
                    <code>{w.org_id}</code>
                  </td>
                ) : null}
                <td>
                  <Status value={w.status} />
                </td>
                <td>{w.activity ?? '—'}</td>
                <td class="num" title="Requests in flight the daemon settled on">
                  {w.concurrency ?? '—'}
                </td>
                <td>
                  <VramBar total={w.vram_total_gb} available={w.vram_available_gb} />
                </td>
                <td>
                  <WorkerGpus name={w.name} gpus={w.gpus} models={w.models} />
                </td>
                <td>
                  <WorkerModels name={w.name} models={w.models} />
                </td>
                <td>
                  {w.current_job_id ? (
                    <a href={`/app/batches/${w.current_job_id}`}>{w.current_job_id}</a>
                  ) : (
                    '—'
                  )}
                </td>
                <td>{formatAgo(w.last_heartbeat_at, now)}</td>
                {org && manages ? (
                  <td>
                    <ConfirmAction
                      label="Remove"
                      name={`Remove worker ${w.name}`}
                      question={`Remove ${w.name}? What it holds goes back to the queue; a daemon still running registers again (revoke its key to keep it out).`}
                      confirm="Confirm removal"
                      run={async () => {
                        await ok(client.v1.orgs({ org_id: org }).workers({ worker_id: w.id }).delete())
                        list.reload()
                      }}
                    />
                  </td>
                ) : null}
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <Pager list={list} label={label} />
    </>
  )
}

type WorkerModel = {
  name: string
  state: string
  progress: { completed_bytes: number | null; total_bytes: number | null } | null
  failure?: { error: string; failures: number; retry_at: number } | null
  gpus: number[] | null
}

type WorkerGpu = {
  name: string | null
  vram_gb: number | null
  index: number
  memory_used_gb: number | null
  memory_total_gb: number | null
}

/**
 * docs/api.md §7 "Worker row" `gpus`: each GPU with its memory as the last heartbeat reported it,
 * and the models sitting on it (`models[].gpus`).
 */
function WorkerGpus({ name, gpus, models }: { name: string; gpus: WorkerGpu[]; models: WorkerModel[] }) {
  if (!gpus.length) return <>—</>
  return (
    <ul class="gpus" aria-label={`GPUs of ${name}`}>
      {gpus.map((g) => {
        const on = models.filter((m) => m.gpus?.includes(g.index)).map((m) => m.name)
        const total = g.memory_total_gb ?? g.vram_gb
        return (
          <li key={g.index}>
            GPU {g.index} <small class="muted">{g.name}</small>{' '}
            {g.memory_used_gb !== null && total ? (
              <meter
                min={0}
                max={1}
                value={g.memory_used_gb / total}
                aria-label={`Memory of GPU ${g.index}`}
              />
            ) : null}
            <span>{g.memory_used_gb !== null ? `${g.memory_used_gb} / ${total} GB` : `${total} GB`}</span>
            {on.length ? (
              <>
                {' · '}
                {on.join(', ')}
              </>
            ) : null}
          </li>
        )
      })}
    </ul>
  )
}

/**
 * docs/api.md §11: each model the worker holds and where it stands (docs/api.md §7 "Worker row"
 * `models[].state`): loaded, loading, on disk, downloading with its progress, a download that
 * failed, with why and until when the worker is not asked for it again, or a load that failed, with
 * why and until when the worker does not load it again.
 */
function WorkerModels({ name, models }: { name: string; models: WorkerModel[] }) {
  if (!models.length) return <>—</>
  const order: Record<string, number> = {
    loaded: 0,
    loading: 1,
    downloading: 2,
    verifying: 3,
    download_failed: 4,
    load_failed: 5,
  }
  const sorted = [...models].sort(
    (a, b) => (order[a.state] ?? 6) - (order[b.state] ?? 6) || a.name.localeCompare(b.name),
  )
  return (
    <ul class="models" aria-label={`Models of ${name}`}>
      {sorted.map((m) => (
        <li key={m.name}>
          <code>{m.name}</code> <span class={`status status-${m.state}`}>{formatModelState(m)}</span>
          {m.gpus?.length ? <small class="muted"> on GPU {m.gpus.join(', ')}</small> : null}
          {m.failure ? (
            <span class="muted download-failure">
              {' '}
              {m.failure.error} (
              {m.state === 'load_failed' ? 'not loaded there again before' : 'not asked again before'}{' '}
              {formatTime(m.failure.retry_at)})
            </span>
          ) : null}
        </li>
      ))}
    </ul>
  )
}

function VramBar({ total, available }: { total: number | null; available: number | null }) {
  const share = vramShare(total, available)
  return (
    <div class="vram">
      {share === null ? null : <meter min={0} max={1} value={share} aria-label="VRAM in use" />}
      <span>{formatVram(total, available)}</span>
    </div>
  )
}
