import { expect } from 'bun:test'
import { and, eq } from 'drizzle-orm'
import type { Server } from '../../src/compose'
import type { BatchEvent } from '../../src/lib/batch-events'
import { newId } from '../../src/lib/ids'
import { runOnce } from '../../src/services/validator'
import type { Res, TestApp, TestServer } from './app'
import { type CatalogEntryInput, makeCatalogEntry as makeEntry } from './catalogue'
import { rowsOf } from './rows'

// Builders for files and batches: catalogue entries (through the seeding path), uploads, batches,
// validation, workers and assignments.

type Target = Pick<TestApp, 'req' | 'deps'> | Pick<TestServer, 'req' | 'deps'>

let seq = 0

/** A public chat entry served as `test:latest`, written the way seeding writes it. */
export const makeCatalogEntry = (t: Pick<TestApp, 'deps'>, over: CatalogEntryInput = {}) =>
  makeEntry(t.deps, {
    id: `model-${++seq}-q4km`,
    display_name: 'Test model',
    runtime_model_id: 'test:latest',
    ...over,
  })

/** One JSONL request line. */
export const line = (customId: string, model: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    custom_id: customId,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model, messages: [{ role: 'user', content: 'hi' }] },
    ...extra,
  })

export const jsonl = (lines: string[]) => lines.map((l) => l + '\n').join('')

export function uploadForm(
  content: string | Uint8Array,
  filename = 'input.jsonl',
  purpose: string | null = 'batch',
) {
  const form = new FormData()
  if (purpose !== null) form.append('purpose', purpose)
  form.append('file', new Blob([content]), filename)
  return form
}

export function upload(
  t: Target,
  token: string,
  content: string | Uint8Array,
  filename = 'input.jsonl',
  purpose: string | null = 'batch',
): Promise<Res> {
  return t.req('POST', '/v1/files', { token, raw: uploadForm(content, filename, purpose) })
}

export async function makeFile(t: Target, user: { token: string }, content: string | Uint8Array) {
  const res = await upload(t, user.token, content)
  expect(res.status).toBe(200)
  return res.body.id as string
}

/** Uploads `content` and creates a batch on it (status `validating`). */
export async function makeBatch(
  t: Target,
  user: { token: string },
  content: string | Uint8Array,
  body: Record<string, unknown> = {},
) {
  const fileId = await makeFile(t, user, content)
  const res = await t.req('POST', '/v1/batches', {
    token: user.token,
    body: { input_file_id: fileId, ...body },
  })
  expect(res.status).toBe(200)
  return res.body as { id: string; input_file_id: string; status: string }
}

/** Runs the validator over every batch still `validating`. */
export const validateAll = (t: Pick<TestApp, 'deps'>) => runOnce(t.deps)

export async function getBatch(t: Target, user: { token: string }, id: string) {
  const res = await t.req('GET', `/v1/batches/${id}`, { token: user.token })
  expect(res.status).toBe(200)
  return res.body
}

/** A worker row of `orgId` (registration belongs to the workers workstream). */
export async function makeWorker(t: Pick<TestApp, 'deps'>, orgId: string) {
  const now = t.deps.clock.now()
  const { db, tables } = rowsOf(t.deps)
  const [worker] = await db
    .insert(tables.workers)
    .values({
      id: newId('wrk_'),
      org_id: orgId,
      name: 'gpu-box',
      status: 'online',
      registered_at: now,
      last_seen_at: now,
    })
    .returning()
  return worker!
}

/** A validated batch held by a worker as after a claim: in_progress, with an open assignment. */
export async function assignBatch(
  t: Pick<TestApp, 'deps'>,
  batchId: string,
  worker: { id: string; org_id: string },
) {
  const now = t.deps.clock.now()
  const { db, tables } = rowsOf(t.deps)
  const moved = await db
    .update(tables.batches)
    .set({ status: 'in_progress', in_progress_at: now, updated_at: now })
    .where(and(eq(tables.batches.id, batchId), eq(tables.batches.status, 'validated')))
    .returning()
  if (!moved.length) throw new Error(`batch ${batchId} is not validated`)
  const [assignment] = await db
    .insert(tables.batchAssignments)
    .values({
      id: newId('asg_'),
      batch_id: batchId,
      worker_id: worker.id,
      org_id: worker.org_id,
      assigned_at: now,
    })
    .returning()
  return assignment!
}

/** The next event of kind `event` for `batchId` on this server's bus (listening from now on). */
export const nextBatchEvent = (deps: Server, batchId: string, event: BatchEvent['event']) =>
  new Promise<BatchEvent>((resolve) => {
    const off = deps.batchEvents.subscribe(batchId, (e) => {
      if (e.event === event) {
        off()
        resolve(e)
      }
    })
  })
