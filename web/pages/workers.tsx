import { QueueChart } from '../components/queue-chart'
import { ErrorNote, ListState, Pager, Section, Status } from '../components/ui'
import { api } from '../lib/api'
import { formatAgo, formatCount, formatVram, vramShare } from '../lib/format'
import { usePaged, useResource } from '../lib/hooks'
import type { List, Org, PoolCapacity, QueueStats, Worker } from '../lib/types'

/** docs/api.md §11 "refreshed without reload at least every 5 s". */
export const LIVE_MS = 5000

export function Workers() {
  const orgs = useResource((signal) => api.get<List<Org>>('/v1/orgs?limit=100', { signal }), 'orgs')
  return (
    <>
      <PoolPanel />
      {orgs.error ? <ErrorNote error={orgs.error} /> : null}
      {orgs.data?.data.map((o) => (
        <Section key={o.id} title={`Workers of ${o.name}`}>
          <WorkerTable path={`/v1/orgs/${o.id}/workers`} label={`Workers of ${o.name}`} />
        </Section>
      ))}
    </>
  )
}

export function PoolPanel() {
  const pool = useResource(
    (signal) => api.get<PoolCapacity>('/v1/pool/capacity', { signal }),
    'pool',
    LIVE_MS,
  )
  const stats = useResource((signal) => api.get<QueueStats>('/v1/stats/queue', { signal }), 'stats', LIVE_MS)
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
  path,
  label,
  showOrg = false,
}: {
  path: string
  label: string
  showOrg?: boolean
}) {
  const list = usePaged<Worker>(path, {}, LIVE_MS, 50)
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
              <th>Loaded models</th>
              <th>Current batch</th>
              <th>Last heartbeat</th>
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
                <td>{w.gpus.length ? w.gpus.map((g) => `${g.name} (${g.vram_gb} GB)`).join(', ') : '—'}</td>
                <td>{w.loaded_models?.length ? w.loaded_models.join(', ') : '—'}</td>
                <td>
                  {w.current_job_id ? (
                    <a href={`/app/batches/${w.current_job_id}`}>{w.current_job_id}</a>
                  ) : (
                    '—'
                  )}
                </td>
                <td>{formatAgo(w.last_heartbeat_at, now)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <Pager list={list} label={label} />
    </>
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
