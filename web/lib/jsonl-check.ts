// The browser-side check of a batch input file before upload (docs/api.md §11 "the file is checked in
// the browser first"): the lines, the model, and the first problems. The server's validation
// (docs/api.md §6) stays the authority; this catches the common mistakes before a long upload.

import { checkBody } from '../../src/domain/batch-body'
import { TOP_LEVEL } from '../../src/domain/batch-line'

export interface FileCheck {
  /** Request lines read (blank lines skipped). */
  requests: number
  /** body.model of the first line that has one. */
  model: string | null
  problems: { line: number | null; message: string }[]
  /** Only the first CHECK_BYTES were read: the figures cover that part. */
  partial: boolean
}

export const MAX_PROBLEMS = 10
/** A large file is checked on its first 8 MiB: enough to catch a wrong format or model. */
export const CHECK_BYTES = 8 * 1024 * 1024

/** Checks the text of a JSONL file (what `checkFile` reads). `partial`: the text was cut. */
export function checkJsonl(text: string, endpoint: string, partial = false): FileCheck {
  const problems: FileCheck['problems'] = []
  const add = (line: number | null, message: string) => {
    if (problems.length < MAX_PROBLEMS) problems.push({ line, message })
  }
  const seen = new Set<string>()
  let model: string | null = null
  let requests = 0
  const lines = text.replace(/^\uFEFF/, '').split('\n')
  // The last line of a cut text may be incomplete: it is not judged.
  if (partial) lines.pop()
  for (const [i, raw] of lines.entries()) {
    const s = raw.endsWith('\r') ? raw.slice(0, -1) : raw
    if (s.trim() === '') continue
    requests++
    model = checkLine(s, i + 1, endpoint, model, seen, add)
  }
  if (requests === 0 && !partial) add(null, 'the file has no request line')
  return { requests, model, problems, partial }
}

/** Reads (the start of) a chosen file and checks it. */
export async function checkFile(file: File, endpoint: string): Promise<FileCheck> {
  const partial = file.size > CHECK_BYTES
  const text = await file.slice(0, CHECK_BYTES).text()
  return checkJsonl(text, endpoint, partial)
}

/** Checks one request line; returns the file's model (the first one seen). */
function checkLine(
  s: string,
  line: number,
  endpoint: string,
  model: string | null,
  seen: Set<string>,
  add: (line: number | null, message: string) => void,
): string | null {
  let value: unknown
  try {
    value = JSON.parse(s)
  } catch {
    add(line, 'not valid JSON')
    return model
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    add(line, 'not a JSON object')
    return model
  }
  const o = value as Record<string, unknown>
  for (const key of Object.keys(o)) if (!TOP_LEVEL.has(key)) add(line, `unknown field "${key}"`)
  if (typeof o.custom_id !== 'string' || o.custom_id === '') add(line, 'custom_id is missing or empty')
  else if (seen.has(o.custom_id)) add(line, `custom_id "${o.custom_id}" repeats an earlier line`)
  else seen.add(o.custom_id)
  if (o.method !== undefined && o.method !== 'POST') add(line, 'method must be POST')
  if (o.url !== undefined && o.url !== endpoint) add(line, `url must be ${endpoint}`)
  const body = o.body as Record<string, unknown> | undefined
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    add(line, 'body is missing')
    return model
  }
  // docs/api.md §6 "Request bodies": the endpoint's checked fields, as the server checks them.
  for (const p of checkBody(endpoint, body)) add(line, p.message)
  if (typeof body.model !== 'string') {
    add(line, 'body.model is missing')
    return model
  }
  if (model === null) return body.model
  if (body.model !== model) add(line, `body.model "${body.model}" differs from "${model}"`)
  return model
}
