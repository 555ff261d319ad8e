import type { CatalogEntryRow } from '../../db/schema'
import { checkBody } from '../../domain/batch-body'
import { type BatchEndpoint, TOP_LEVEL } from '../../domain/batch-line'
import { type Capability, endpointNeeds, lineNeeds, modelCapabilities } from '../../domain/capabilities'
import { MIN_ORDERED_CHARS, type PrefixOrder, promptParts } from '../../domain/prefix-order'
import type { ValidationErrorEvent } from '../../lib/batch-events'
import type { Float64Column } from '../../lib/columns'
import { CompactIdSet } from '../../lib/id-set'

// The rules of a batch input line (docs/api.md §6 "Batch input line", docs/api.md §6 "Validation"), one
// line at a time, in the table's order. Every problem of a line is recorded; the first
// MAX_STORED_ERRORS are kept, the rest only counted (docs/api.md §6). The caller streams the file
// through src/lib/lines.ts and hands each non-blank line here.

export const MAX_STORED_ERRORS = 100
export const MAX_CUSTOM_ID_CHARS = 512
/** Longest `body.model` kept on a failed batch (a bad line may carry any string there). */
const MAX_STORED_MODEL_CHARS = 256
const MODEL_CACHE_LIMIT = 1000

type ModelFacts = Pick<CatalogEntryRow, 'task_type' | 'capabilities'>
export type LookupModel = (id: string) => ModelFacts | null

export interface CheckerOptions {
  endpoint: BatchEndpoint | string
  maxLineBytes: number
  maxRequests: number
  lookupModel: LookupModel
  /** When given, receives the byte offset of every request line (docs/api.md §16 request-line index). */
  lineOffsets?: Float64Column
  /** When given, every request line's prompt goes into the execution order (docs/api.md §6). */
  prefixOrder?: PrefixOrder
  /** Reads `length` bytes at `offset` of the input (to confirm a suspected duplicate id). */
  readBytes: (offset: number, length: number) => Uint8Array | null
  /** Called for each error that is stored (the first MAX_STORED_ERRORS). */
  onStoredError?: (e: ValidationErrorEvent) => void
}

export interface CheckResult {
  requestLines: number
  errorsTotal: number
  errors: ValidationErrorEvent[]
  model: string | null
  /** docs/api.md §6: what the batch needs of a worker's engine (its lines' and its endpoint's). */
  needs: Capability[]
}

const quote = (s: string) => JSON.stringify(s.length > 100 ? `${s.slice(0, 100)}…` : s)
const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v)
const has = (o: object, k: string) => Object.hasOwn(o, k)

function charCount(s: string): number {
  if (s.length <= MAX_CUSTOM_ID_CHARS) return s.length
  let n = 0
  for (const _ of s) n++
  return n
}

export class InputChecker {
  requestLines = 0
  errorsTotal = 0
  readonly errors: ValidationErrorEvent[] = []
  private firstModel: string | undefined
  /** Each model named so far: its entry and what it can do (docs/api.md §4), or null. */
  private readonly models = new Map<string, { id: string; entry: ModelFacts; can: Capability[] } | null>()
  private readonly needs: Set<Capability>
  // ignoreBOM keeps a BOM inside the file as text, so such a line is invalid JSON, not silently
  // accepted; only the one at the start of the file is dropped (by the line splitter).
  private readonly decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })
  readonly ids: CompactIdSet

  constructor(private readonly opts: CheckerOptions) {
    this.ids = new CompactIdSet((offset, length) => this.idAt(offset, length))
    this.needs = new Set(endpointNeeds(opts.endpoint))
  }

  /** One non-blank physical line; `line` null = over MAX_LINE_BYTES. */
  readonly check = (line: Uint8Array | null, lineNo: number, offset: number, length: number) => {
    this.requestLines++
    const indexed = this.requestLines <= this.opts.maxRequests
    // docs/api.md §16: where each request line starts, for the request-line index of a split batch.
    if (this.opts.lineOffsets && indexed) this.opts.lineOffsets.push(offset)
    let body: Record<string, unknown> | null = null
    if (line === null) {
      this.record('line_too_long', lineNo, null, `Line is longer than ${this.opts.maxLineBytes} bytes`)
    } else {
      body = this.checkRequest(line, lineNo, offset, length)
    }
    // docs/api.md §6 "Execution order": the line's prompt as the engine will see it.
    if (this.opts.prefixOrder && indexed)
      this.opts.prefixOrder.add(body && promptParts(this.opts.endpoint, body, MIN_ORDERED_CHARS))
    if (this.requestLines === this.opts.maxRequests + 1) {
      this.record(
        'too_many_requests',
        lineNo,
        null,
        `A batch holds at most ${this.opts.maxRequests} requests; this line is the first beyond it`,
      )
    }
  }

  /** After the last line. */
  finish(): CheckResult {
    if (this.requestLines === 0) this.record('empty_file', null, null, 'The file holds no request line')
    const model =
      this.firstModel !== undefined && this.firstModel.length <= MAX_STORED_MODEL_CHARS
        ? this.firstModel
        : null
    return {
      requestLines: this.requestLines,
      errorsTotal: this.errorsTotal,
      errors: this.errors,
      model,
      needs: [...this.needs],
    }
  }

  /** A problem with the file as a whole (it could not be read). */
  fileError(code: string, message: string) {
    this.record(code, null, null, message)
  }

  private record(code: string, line: number | null, field: string | null, message: string) {
    this.errorsTotal++
    if (this.errors.length >= MAX_STORED_ERRORS) return
    const e = { code, line, field, message }
    this.errors.push(e)
    this.opts.onStoredError?.(e)
  }

  private parse(line: Uint8Array): unknown {
    try {
      return JSON.parse(this.decoder.decode(line))
    } catch {
      // Invalid UTF-8, invalid JSON, or JSON nested too deep for the parser.
      return undefined
    }
  }

  /** The line's checks; returns its body when that is an object. */
  private checkRequest(
    line: Uint8Array,
    lineNo: number,
    offset: number,
    length: number,
  ): Record<string, unknown> | null {
    const value = this.parse(line)
    if (value === undefined) {
      this.record('invalid_json', lineNo, null, 'Line is not valid JSON')
      return null
    }
    if (!isObject(value)) {
      this.record('invalid_json', lineNo, null, 'Line is not a JSON object')
      return null
    }

    for (const key of Object.keys(value)) {
      if (!TOP_LEVEL.has(key)) this.record('unknown_fields', lineNo, key, `Unknown field ${quote(key)}`)
    }

    const body = value.body
    const bodyIsObject = isObject(body)
    if (!has(value, 'custom_id')) this.record('missing_field', lineNo, 'custom_id', 'custom_id is required')
    if (!has(value, 'body')) this.record('missing_field', lineNo, 'body', 'body is required')
    if (bodyIsObject && !has(body, 'model')) {
      this.record('missing_field', lineNo, 'body.model', 'body.model is required')
    }

    const id = value.custom_id
    const idValid = typeof id === 'string' && id.length > 0 && charCount(id) <= MAX_CUSTOM_ID_CHARS
    if (has(value, 'custom_id') && !idValid) {
      this.record(
        'invalid_type',
        lineNo,
        'custom_id',
        `custom_id must be a non-empty string of at most ${MAX_CUSTOM_ID_CHARS} characters`,
      )
    }
    if (has(value, 'body') && !bodyIsObject)
      this.record('invalid_type', lineNo, 'body', 'body must be an object')
    const model = bodyIsObject ? body.model : undefined
    if (bodyIsObject && has(body, 'model') && typeof model !== 'string') {
      this.record('invalid_type', lineNo, 'body.model', 'body.model must be a string')
    }

    if (has(value, 'method') && value.method !== 'POST') {
      this.record('invalid_method', lineNo, 'method', 'method must be "POST"')
    }
    if (has(value, 'url') && value.url !== this.opts.endpoint) {
      this.record(
        'invalid_url',
        lineNo,
        'url',
        `url must be the batch's endpoint ${quote(this.opts.endpoint)}`,
      )
    }

    if (idValid && this.ids.addIfAbsent(id, offset, length)) {
      this.record(
        'duplicate_custom_id',
        lineNo,
        'custom_id',
        `custom_id ${quote(id)} is used on an earlier line`,
      )
    }

    const found = typeof model === 'string' ? this.checkModel(model, lineNo) : null
    // docs/api.md §6 "Request bodies": the endpoint's checked body fields, whatever the model.
    if (bodyIsObject) {
      for (const p of checkBody(this.opts.endpoint, body)) this.record(p.code, lineNo, p.field, p.message)
      // docs/api.md §6 "Capabilities a line asks for": the model must be able to do them; the
      // batch records all of them (the claim then needs an engine that has them, §7 Poll rule 7).
      for (const need of lineNeeds(this.opts.endpoint, body)) {
        this.needs.add(need.capability)
        if (found && !found.can.includes(need.capability)) {
          this.record(
            'unsupported_capability',
            lineNo,
            need.field,
            `Model ${quote(found.id)} does not support ${need.capability}, which ${need.field} asks for`,
          )
        }
      }
    }
    return bodyIsObject ? body : null
  }

  /** The model checks of the table; the entry found, or null. */
  private checkModel(model: string, lineNo: number) {
    const found = this.lookup(model)
    const entry = found?.entry
    if (!entry) {
      this.record('unsupported_model', lineNo, 'body.model', `Model ${quote(model)} is not in the catalogue`)
    }
    if (this.firstModel === undefined) this.firstModel = model
    else if (model !== this.firstModel) {
      this.record(
        'model_mismatch',
        lineNo,
        'body.model',
        `Every line must name the same model as the first (${quote(this.firstModel)})`,
      )
    }
    // An embedding model only serves /v1/embeddings, and /v1/embeddings only takes embedding models;
    // every other entry (chat, vision, text-generation) serves the other endpoints, /v1/responses too.
    if (entry && (entry.task_type === 'embedding') !== (this.opts.endpoint === '/v1/embeddings')) {
      this.record(
        'unsupported_endpoint',
        lineNo,
        'body.model',
        `Model ${quote(model)} (${entry.task_type}) cannot serve ${this.opts.endpoint}`,
      )
    }
    return found
  }

  private lookup(model: string) {
    const cached = this.models.get(model)
    if (cached !== undefined) return cached
    const entry = this.opts.lookupModel(model)
    const found = entry && { id: model, entry, can: modelCapabilities(entry) }
    if (this.models.size < MODEL_CACHE_LIMIT) this.models.set(model, found)
    return found
  }

  /** The custom_id of the (earlier, valid) line at offset/length, read back from the file. */
  private idAt(offset: number, length: number): string | null {
    const bytes = this.opts.readBytes(offset, length)
    if (!bytes) return null
    const value = this.parse(bytes)
    return isObject(value) && typeof value.custom_id === 'string' ? value.custom_id : null
  }
}
