import type { AuditEvent, Batch, FileObject, List, Model } from './api'
import { flag, numberOption, type Parsed, positionals, type Spec, stringOption } from './args'
import type { Context } from './batch'
import { EXIT, usageError } from './exit'
import { formatBytes, formatCount, formatTime, table } from './view'

// `gridkeep batches`, `files`, `models` and `audit`: the lists of docs/api.md §0 (newest first,
// `limit` and `after`), as a table on a terminal, one JSON object per item otherwise.

const PAGE: Spec = { limit: { value: true }, after: { value: true } }
export const BATCHES_SPEC: Spec = { ...PAGE, status: { value: true } }
export const FILES_SPEC: Spec = { ...PAGE, purpose: { value: true } }
export const MODELS_SPEC: Spec = { available: {} }
export const AUDIT_SPEC: Spec = {
  ...PAGE,
  actor: { value: true },
  action: { value: true },
  target: { value: true },
  'target-kind': { value: true },
  org: { value: true },
  start: { value: true },
  end: { value: true },
}

function query(p: Parsed, extra: string[]): string {
  const q = new URLSearchParams({ limit: String(numberOption(p, 'limit', 20, 1, 100)) })
  const after = stringOption(p, 'after')
  if (after) q.set('after', after)
  for (const name of extra) {
    const v = stringOption(p, name)
    if (v) q.set(name, v)
  }
  return q.toString()
}

/**
 * Rows as JSON lines (a pipe, --json), or a table: `none` when there are none. Returns false when
 * nothing more is to be printed (JSON, or no rows).
 */
function showRows<T>(ctx: Context, rows: T[], none: string, headers: string[], row: (x: T) => string[]) {
  if (ctx.view.json) {
    for (const x of rows) ctx.view.data(x)
    return false
  }
  if (rows.length === 0) {
    ctx.view.print(none)
    return false
  }
  ctx.view.print(table(headers, rows.map(row)))
  return true
}

/**
 * A page of a §0 list, then the command that shows the next page (with `again`: the options that
 * chose this list, so the next page is of the same list).
 */
function showPage<T>(
  ctx: Context,
  command: string,
  list: List<T>,
  headers: string[],
  row: (x: T) => string[],
  again = '',
) {
  if (showRows(ctx, list.data, `no ${command}`, headers, row) && list.has_more && list.last_id)
    ctx.view.print(`more: gridkeep ${command}${again} --after ${list.last_id}`)
  return EXIT.ok
}

export async function batches(p: Parsed, ctx: Context): Promise<number> {
  positionals(p, [])
  const list = await ctx.api.json<List<Batch>>('GET', `/v1/batches?${query(p, ['status'])}`)
  return showPage(ctx, 'batches', list, ['BATCH', 'STATUS', 'MODEL', 'DONE', 'FAILED', 'CREATED'], (b) => {
    const c = b.request_counts
    return [
      b.id,
      b.status,
      b.model ?? '-',
      `${formatCount(c.completed + c.failed)}/${formatCount(c.total)}`,
      formatCount(c.failed),
      formatTime(b.created_at),
    ]
  })
}

export async function files(p: Parsed, ctx: Context): Promise<number> {
  positionals(p, [])
  const list = await ctx.api.json<List<FileObject>>('GET', `/v1/files?${query(p, ['purpose'])}`)
  return showPage(ctx, 'files', list, ['FILE', 'NAME', 'SIZE', 'PURPOSE', 'CREATED'], (f) => [
    f.id,
    f.filename,
    formatBytes(f.bytes),
    f.purpose,
    formatTime(f.created_at),
  ])
}

export async function models(p: Parsed, ctx: Context): Promise<number> {
  positionals(p, [])
  const list = await ctx.api.json<List<Model>>('GET', '/v1/models')
  const shown = list.data
    .filter((m) => !flag(p, 'available') || m.available)
    .sort((a, b) => Number(b.available) - Number(a.available) || a.id.localeCompare(b.id))
  const none = flag(p, 'available') ? 'no model can run now: no online worker hosts one' : 'no models'
  const headers = ['MODEL', 'AVAILABLE', 'TASK', 'SIZE', 'QUANT', 'VRAM']
  const listed = showRows(ctx, shown, none, headers, (m) => [
    m.id,
    m.available ? 'yes' : 'no',
    m.task_type,
    m.parameter_size ?? '-',
    m.quantization ?? '-',
    m.vram_gb === null ? '-' : `${m.vram_gb} GB`,
  ])
  if (!listed) return EXIT.ok
  const available = list.data.filter((m) => m.available).length
  ctx.view.print(`${available} of ${list.data.length} models can run now (a worker online hosts them)`)
  return EXIT.ok
}

/** A time option: Unix seconds, or a date or date and time (local unless it names its zone). */
function timeOption(p: Parsed, name: string): string | undefined {
  const raw = stringOption(p, name)
  if (raw === undefined) return undefined
  if (/^[0-9]+$/.test(raw)) return raw
  const ms = Date.parse(/^\d{4}-\d{2}-\d{2}$/.test(raw) ? `${raw}T00:00:00` : raw)
  if (Number.isNaN(ms)) throw usageError(`--${name} takes Unix seconds or a date (2026-05-01), not '${raw}'`)
  return String(Math.floor(ms / 1000))
}

/** A value as the shell reads it back: quoted when it holds anything but plain characters. */
const shellWord = (v: string) => (/^[\w@%+=:,./-]+$/.test(v) ? v : `'${v.replaceAll("'", "'\\''")}'`)

/** The audit filters of docs/api.md §17, by the client's option names. */
const AUDIT_FILTERS: [option: string, param: string][] = [
  ['actor', 'actor'],
  ['action', 'action'],
  ['target', 'target_id'],
  ['target-kind', 'target_kind'],
  ['org', 'org_id'],
]

/** `gridkeep audit`: the audit log entries the key's user may read (docs/api.md §17). */
export async function audit(p: Parsed, ctx: Context): Promise<number> {
  positionals(p, [])
  const q = new URLSearchParams(query(p, []))
  let again = ''
  for (const [option, param] of AUDIT_FILTERS) {
    const v = stringOption(p, option)
    if (v === undefined) continue
    q.set(param, v)
    again += ` --${option} ${shellWord(v)}`
  }
  for (const name of ['start', 'end']) {
    const v = timeOption(p, name)
    if (v === undefined) continue
    q.set(name, v)
    again += ` --${name} ${v}`
  }
  const list = await ctx.api.json<List<AuditEvent>>('GET', `/v1/audit-events?${q}`)
  return showPage(
    ctx,
    'audit',
    list,
    ['TIME', 'ACTION', 'ACTOR', 'TARGET', 'ORG', 'FROM'],
    (e) => [
      formatTime(e.created_at),
      e.action,
      e.actor.id ?? e.actor.kind,
      e.target.id ?? e.target.kind,
      e.org_id ?? '-',
      e.ip ?? '-',
    ],
    again,
  )
}
