import type { Batch, FileObject, List, Model } from './api'
import { flag, numberOption, type Parsed, positionals, type Spec, stringOption } from './args'
import type { Context } from './batch'
import { EXIT } from './exit'
import { formatBytes, formatCount, formatTime, table } from './view'

// `gridkeep batches`, `files` and `models`: the lists of docs/api.md §0 (newest first, `limit` and
// `after`), as a table on a terminal, one JSON object per item otherwise.

const PAGE: Spec = { limit: { value: true }, after: { value: true } }
export const BATCHES_SPEC: Spec = { ...PAGE, status: { value: true } }
export const FILES_SPEC: Spec = { ...PAGE, purpose: { value: true } }
export const MODELS_SPEC: Spec = { available: {} }

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

function more(ctx: Context, command: string, list: List<unknown>) {
  if (list.has_more && list.last_id) ctx.view.print(`more: gridkeep ${command} --after ${list.last_id}`)
}

export async function batches(p: Parsed, ctx: Context): Promise<number> {
  positionals(p, [])
  const list = await ctx.api.json<List<Batch>>('GET', `/v1/batches?${query(p, ['status'])}`)
  if (ctx.view.json) {
    for (const b of list.data) ctx.view.data(b)
    return EXIT.ok
  }
  if (list.data.length === 0) {
    ctx.view.print('no batches')
    return EXIT.ok
  }
  ctx.view.print(
    table(
      ['BATCH', 'STATUS', 'MODEL', 'DONE', 'FAILED', 'CREATED'],
      list.data.map((b) => {
        const c = b.request_counts
        return [
          b.id,
          b.status,
          b.model ?? '-',
          `${formatCount(c.completed + c.failed)}/${formatCount(c.total)}`,
          formatCount(c.failed),
          formatTime(b.created_at),
        ]
      }),
    ),
  )
  more(ctx, 'batches', list)
  return EXIT.ok
}

export async function files(p: Parsed, ctx: Context): Promise<number> {
  positionals(p, [])
  const list = await ctx.api.json<List<FileObject>>('GET', `/v1/files?${query(p, ['purpose'])}`)
  if (ctx.view.json) {
    for (const f of list.data) ctx.view.data(f)
    return EXIT.ok
  }
  if (list.data.length === 0) {
    ctx.view.print('no files')
    return EXIT.ok
  }
  ctx.view.print(
    table(
      ['FILE', 'NAME', 'SIZE', 'PURPOSE', 'CREATED'],
      list.data.map((f) => [f.id, f.filename, formatBytes(f.bytes), f.purpose, formatTime(f.created_at)]),
    ),
  )
  more(ctx, 'files', list)
  return EXIT.ok
}

export async function models(p: Parsed, ctx: Context): Promise<number> {
  positionals(p, [])
  const list = await ctx.api.json<List<Model>>('GET', '/v1/models')
  const shown = list.data
    .filter((m) => !flag(p, 'available') || m.available)
    .sort((a, b) => Number(b.available) - Number(a.available) || a.id.localeCompare(b.id))
  if (ctx.view.json) {
    for (const m of shown) ctx.view.data(m)
    return EXIT.ok
  }
  if (shown.length === 0) {
    ctx.view.print(flag(p, 'available') ? 'no model can run now: no online worker hosts one' : 'no models')
    return EXIT.ok
  }
  ctx.view.print(
    table(
      ['MODEL', 'AVAILABLE', 'TASK', 'SIZE', 'QUANT', 'VRAM'],
      shown.map((m) => [
        m.id,
        m.available ? 'yes' : 'no',
        m.task_type,
        m.parameter_size ?? '-',
        m.quantization ?? '-',
        m.vram_gb === null ? '-' : `${m.vram_gb} GB`,
      ]),
    ),
  )
  const available = list.data.filter((m) => m.available).length
  ctx.view.print(`${available} of ${list.data.length} models can run now (a worker online hosts them)`)
  return EXIT.ok
}
