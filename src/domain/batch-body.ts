import type { BatchEndpoint } from './batch-line'

// The request body of a batch input line, per endpoint (docs/api.md §6 "Request bodies"): which body
// fields validation checks, and how. Every other body field is the engine's and passes unchecked, as
// on every endpoint. Pure data and functions (importing only batch-line.ts, itself import-free): the
// server's validation (src/modules/batches/validation.ts) and the dashboard's check before upload
// (web/lib/jsonl-check.ts) both use it.

export interface BodyProblem {
  code: 'missing_field' | 'invalid_type' | 'invalid_value' | 'unsupported_value'
  /** The field's path: `body.input`, `body.text.format.type`. */
  field: string
  message: string
}

/** One field's check: its first problem, or null. `path` names the field (`body.x`). */
export type FieldCheck = (value: unknown, path: string) => BodyProblem | null

export interface BodyField {
  /** Absent or null is `missing_field`; otherwise an absent or null field is not checked. */
  required?: boolean
  check: FieldCheck
}

/** An endpoint's body: its checked fields, in the order their problems are recorded. */
export type BodySpec = Readonly<Record<string, BodyField>>

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v)

const problem = (code: BodyProblem['code'], field: string, message: string): BodyProblem => ({
  code,
  field,
  message,
})
const mustBe = (path: string, what: string) => problem('invalid_type', path, `${path} must be ${what}`)
const outOf = (path: string, what: string) => problem('invalid_value', path, `${path} must be ${what}`)
const quoted = (values: readonly string[]) => values.map((v) => JSON.stringify(v)).join(', ')

const string: FieldCheck = (v, path) => (typeof v === 'string' ? null : mustBe(path, 'a string'))
const boolean: FieldCheck = (v, path) => (typeof v === 'boolean' ? null : mustBe(path, 'true or false'))
const object: FieldCheck = (v, path) => (isObject(v) ? null : mustBe(path, 'an object'))

function integer(min: number, max = Number.POSITIVE_INFINITY): FieldCheck {
  const range = max === Number.POSITIVE_INFINITY ? `at least ${min}` : `from ${min} to ${max}`
  return (v, path) => {
    if (typeof v !== 'number' || !Number.isInteger(v)) return mustBe(path, 'an integer')
    return v < min || v > max ? outOf(path, `an integer ${range}`) : null
  }
}

const anyInteger: FieldCheck = (v, path) =>
  typeof v === 'number' && Number.isInteger(v) ? null : mustBe(path, 'an integer')

function number(min: number, max: number): FieldCheck {
  return (v, path) => {
    if (typeof v !== 'number') return mustBe(path, 'a number')
    return v < min || v > max ? outOf(path, `a number from ${min} to ${max}`) : null
  }
}

function oneOf(values: readonly string[]): FieldCheck {
  return (v, path) => {
    if (typeof v !== 'string') return mustBe(path, `one of ${quoted(values)}`)
    return values.includes(v) ? null : outOf(path, `one of ${quoted(values)}`)
  }
}

/** An array whose every item passes `item` (`what` says what an item is, for the message). */
function arrayOf(what: string, item: (v: unknown) => boolean): FieldCheck {
  return (v, path) => {
    if (!Array.isArray(v)) return mustBe(path, `an array of ${what}`)
    const bad = v.findIndex((x) => !item(x))
    return bad < 0 ? null : mustBe(path, `an array of ${what}; item ${bad} is not`)
  }
}

const typed = (v: unknown) => isObject(v) && typeof v.type === 'string'

/** `stream` on every endpoint: a batch request's result is one response body, never a stream. */
const noStream: FieldCheck = (v, path) => {
  if (typeof v !== 'boolean') return mustBe(path, 'true or false')
  return v
    ? problem('unsupported_value', path, `A batch request cannot stream: omit ${path} or set it to false`)
    : null
}

// OpenAI's `POST /v1/responses` request body (the `openai` SDK's ResponseCreateParams), the fields
// that make sense in a batch.
const INPUT: FieldCheck = (v, path) =>
  typeof v === 'string' || (Array.isArray(v) && v.every(isObject))
    ? null
    : mustBe(path, 'a string or an array of input items (objects)')

const TEXT_FORMATS = ['text', 'json_object', 'json_schema'] as const

const TEXT: FieldCheck = (v, path) => {
  if (!isObject(v)) return mustBe(path, 'an object')
  const format = v.format
  if (format === undefined || format === null) return null
  const at = `${path}.format`
  if (!isObject(format)) return mustBe(at, 'an object')
  if (format.type === undefined || format.type === null)
    return problem('missing_field', `${at}.type`, `${at}.type is required`)
  const type = oneOf(TEXT_FORMATS)(format.type, `${at}.type`)
  if (type) return type
  if (format.type !== 'json_schema') return null
  if (typeof format.name !== 'string') return mustBe(`${at}.name`, 'a string (the schema’s name)')
  return object(format.schema, `${at}.schema`)
}

const TOOL_CHOICE: FieldCheck = (v, path) => {
  if (typeof v === 'string') return oneOf(['none', 'auto', 'required'])(v, path)
  return typed(v) ? null : mustBe(path, '"none", "auto", "required" or an object with a string type')
}

const METADATA: FieldCheck = (v, path) =>
  isObject(v) && Object.values(v).every((x) => typeof x === 'string')
    ? null
    : mustBe(path, 'an object of string values')

const refusedIfTrue =
  (why: string): FieldCheck =>
  (v, path) => {
    if (typeof v !== 'boolean') return mustBe(path, 'true or false')
    return v ? problem('unsupported_value', path, `${path} cannot be true in a batch: ${why}`) : null
  }

const refused =
  (why: string): FieldCheck =>
  (_v, path) =>
    problem('unsupported_value', path, `${path} cannot be used in a batch: ${why}`)

const ENGINE_STATE = 'it names state one engine holds, and a batch’s lines run on any worker, in any order'

const COMMON: BodySpec = { stream: { check: noStream } }

const RESPONSES: BodySpec = {
  input: { required: true, check: INPUT },
  instructions: { check: string },
  max_output_tokens: { check: integer(1) },
  temperature: { check: number(0, 2) },
  top_p: { check: number(0, 1) },
  top_logprobs: { check: integer(0, 20) },
  seed: { check: anyInteger },
  text: { check: TEXT },
  tools: { check: arrayOf('tools (objects with a string type)', typed) },
  tool_choice: { check: TOOL_CHOICE },
  parallel_tool_calls: { check: boolean },
  store: { check: boolean },
  reasoning: { check: object },
  metadata: { check: METADATA },
  truncation: { check: oneOf(['auto', 'disabled']) },
  user: { check: string },
  include: { check: arrayOf('strings', (x) => typeof x === 'string') },
  ...COMMON,
  background: { check: refusedIfTrue('the engine would answer a queued response, not its result') },
  previous_response_id: { check: refused(ENGINE_STATE) },
  conversation: { check: refused(ENGINE_STATE) },
}

/** Each batch endpoint's body (docs/api.md §6 "Request bodies"). */
export const BODIES: Readonly<Record<BatchEndpoint, BodySpec>> = {
  '/v1/chat/completions': COMMON,
  '/v1/completions': COMMON,
  '/v1/embeddings': COMMON,
  '/v1/responses': RESPONSES,
}

/** The problems of one line's body for `endpoint`, in the spec's field order, at most one a field. */
export function checkBody(endpoint: string, body: Record<string, unknown>): BodyProblem[] {
  const problems: BodyProblem[] = []
  const spec = Object.hasOwn(BODIES, endpoint) ? BODIES[endpoint as BatchEndpoint] : COMMON
  for (const [name, field] of Object.entries(spec)) {
    const value = Object.hasOwn(body, name) ? body[name] : undefined
    const path = `body.${name}`
    if (value === undefined || value === null) {
      if (field.required) problems.push(problem('missing_field', path, `${path} is required`))
      continue
    }
    const p = field.check(value, path)
    if (p) problems.push(p)
  }
  return problems
}
