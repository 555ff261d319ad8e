import { expect } from 'bun:test'
import type { Server } from '../../src/compose'
import { newId } from '../../src/lib/ids'
import type { Job } from '../../src/modules/workers/claim'
import { packLineOffsets } from '../../src/store/batches'
import type { TestApp, TestServer } from './app'
import { writeBlob } from './blobs'
import { type MadeUser, makeUser, makeWorkerKey } from './builders'
import { type CatalogEntryInput, makeCatalogEntry as makeEntry } from './catalogue'
import { rowsOf } from './rows'

// Builders for the worker protocol: files and validated batches are inserted directly, catalogue
// entries through the seeding path; workers go through the real /workers routes.

type Target = Pick<TestApp, 'req' | 'deps'> | Pick<TestServer, 'req' | 'deps'>

export interface Fleet {
  user: MadeUser
  orgId: string
  key: string
  keyId: string
}

/** A user whose Personal Org holds a worker key. */
export async function makeFleet(t: Target): Promise<Fleet> {
  const user = await makeUser(t)
  const key = await makeWorkerKey(t, user, user.personalOrgId)
  return { user, orgId: user.personalOrgId, key: key.key, keyId: key.id }
}

export interface EntryOptions {
  id?: string
  runtime?: string | null
  runtime_model_id?: string | null
  digest?: string | null
  vram_gb?: number | null
  size_gb?: number | null
  enabled?: boolean
  org_id?: string | null
  renamed_from?: string | null
  display_name?: string
  parameter_size?: string | null
  task_type?: 'chat' | 'text-generation' | 'embedding' | 'vision'
  capabilities?: Record<string, boolean>
  profiles?: { runtime: string; runtime_model_id: string; params?: Record<string, unknown> }[]
  artifact_files?: { path: string; sha256: string; size_bytes?: number }[]
  source_type?: string | null
  source_ref?: string | null
  source_revision?: string | null
}

/**
 * A catalogue entry written the way seeding writes it (test/helpers/catalogue.ts), with the
 * defaults these tests assume: a Q4_K_M 8B model needing 8 GB of VRAM and 5 GB of disk.
 */
export function makeCatalogEntry(deps: Server, o: EntryOptions = {}) {
  const { profiles, ...rest } = o
  return makeEntry(deps, {
    quantization: 'Q4_K_M',
    parameter_size: '8B',
    context_length: 8192,
    vram_gb: 8,
    size_gb: 5,
    ...rest,
    ...(profiles ? { serving_profiles: profiles as CatalogEntryInput['serving_profiles'] } : {}),
  } as CatalogEntryInput)
}

export const inputLine = (customId: string, model: string) =>
  JSON.stringify({
    custom_id: customId,
    method: 'POST',
    url: '/v1/chat/completions',
    body: { model, messages: [{ role: 'user', content: `hello ${customId}` }] },
  })

export interface BatchOptions {
  userId: string
  model: string
  requests?: number
  customIds?: string[]
  status?: 'validated' | 'validating'
  /** Writes the request-line index validation writes (docs/api.md §16: the batch may be split). */
  indexed?: boolean
  /** The stored needs validation would write (docs/api.md §6; src/domain/capabilities.ts needsKey). */
  needs?: string
  endpoint?: string
}

/** An uploaded input file (its bytes in the blob store) and a batch already `validated`. */
export async function makeValidatedBatch(deps: Server, o: BatchOptions) {
  const ids = o.customIds ?? Array.from({ length: o.requests ?? 3 }, (_, i) => `req-${i + 1}`)
  const content = ids.map((id) => inputLine(id, o.model)).join('\n') + '\n'
  const fileId = newId('file-')
  await writeBlob(deps, fileId, content)
  const now = deps.clock.now()
  await deps.store.files.insert({
    id: fileId,
    user_id: o.userId,
    filename: 'input.jsonl',
    purpose: 'batch',
    bytes: Buffer.byteLength(content),
    created_at: now,
  })
  const { db, tables } = rowsOf(deps)
  const [batch] = await db
    .insert(tables.batches)
    .values({
      id: newId('batch_'),
      user_id: o.userId,
      input_file_id: fileId,
      endpoint: o.endpoint ?? '/v1/chat/completions',
      completion_window: '24h',
      model: o.model,
      needs: o.needs ?? '',
      status: o.status ?? 'validated',
      request_counts_total: ids.length,
      created_at: now,
      updated_at: now,
      // docs/api.md §7 placement: a validated batch waits from now, as validation would stamp it.
      queued_at: (o.status ?? 'validated') === 'validated' ? now : null,
    })
    .returning()
  if (o.indexed) {
    const offsets: number[] = []
    let at = 0
    for (const id of ids) {
      offsets.push(at)
      at += Buffer.byteLength(inputLine(id, o.model)) + 1
    }
    await db.insert(tables.batchLineIndex).values({ batch_id: batch!.id, offsets: packLineOffsets(offsets) })
  }
  return batch!
}

export const batchRow = async (deps: Server, id: string) => (await deps.store.batches.get(id, null))!
export const workerRow = async (deps: Server, id: string) => (await deps.store.fleet.findWorker(id))!

export const sha = (seed: string) => new Bun.CryptoHasher('sha256').update(seed).digest('hex')

export interface InventoryItem {
  local_name: string
  sha256: string
  size_bytes: number
  loaded: boolean
  runtime: string
}

export const inventoryItem = (local_name: string, o: Partial<InventoryItem> = {}): InventoryItem => ({
  local_name,
  sha256: o.sha256 ?? sha(local_name),
  size_bytes: o.size_bytes ?? 1_000_000,
  loaded: o.loaded ?? false,
  runtime: o.runtime ?? 'ollama',
})

export function registerBody(o: Record<string, unknown> = {}) {
  return {
    name: 'gpu-box',
    hostname: 'gpu-box.lab',
    daemon_version: '0.1.0',
    runtimes: [{ engine: 'ollama', base_url: 'http://127.0.0.1:11434', status: 'online' }],
    gpus: [{ vendor: 'nvidia', name: 'RTX 4090', vram_gb: 24, driver: '550.1', cuda: '12.4' }],
    ...o,
  }
}

/** Registers a worker through the real route; returns its id. */
export async function registerWorker(
  t: Target,
  key: string,
  o: Record<string, unknown> = {},
): Promise<string> {
  const res = await t.req('POST', '/workers/register', { token: key, body: registerBody(o) })
  expect(res.status).toBe(200)
  return res.body.worker_id as string
}

export function heartbeatBody(o: Record<string, unknown> = {}) {
  return {
    activity: 'idle',
    gpu_utilization: 3,
    gpu_memory_used_gb: 1,
    vram_total_gb: 24,
    vram_available_gb: 23,
    loaded_models: [],
    uptime_seconds: 100,
    ...o,
  }
}

export async function heartbeat(t: Target, key: string, workerId: string, o: Record<string, unknown> = {}) {
  return t.req('POST', `/workers/${workerId}/heartbeat`, { token: key, body: heartbeatBody(o) })
}

export async function poll(t: Target, key: string, workerId: string) {
  const res = await t.req('POST', '/workers/poll', { token: key, body: { worker_id: workerId } })
  expect(res.status).toBe(200)
  return res.body.job as Job | null
}

export const okLine = (
  customId: string,
  usage = { prompt_tokens: 5, completion_tokens: 7, total_tokens: 12 },
) =>
  JSON.stringify({
    id: `batch_req_${customId}`,
    custom_id: customId,
    response: {
      status_code: 200,
      request_id: `req_${customId}`,
      body: { id: 'chatcmpl-1', object: 'chat.completion', choices: [], usage },
    },
    error: null,
  })

export const errorLine = (customId: string) =>
  JSON.stringify({
    id: `batch_req_${customId}`,
    custom_id: customId,
    response: { status_code: 500, request_id: `req_${customId}`, body: { error: { message: 'boom' } } },
    error: null,
  })

export function uploadForm(
  fields: Record<string, string | number | undefined>,
  content: string | Uint8Array,
) {
  const form = new FormData()
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) form.append(k, String(v))
  form.append('file', new Blob([content], { type: 'application/jsonl' }), 'output.jsonl')
  return form
}

export async function upload(
  t: Target,
  key: string,
  fields: Record<string, string | number | undefined>,
  content: string | Uint8Array,
) {
  return t.req('POST', '/workers/upload-results', { token: key, raw: uploadForm(fields, content) })
}
