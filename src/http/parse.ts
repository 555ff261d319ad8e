import { AppError, badRequest, tooLarge } from '../lib/errors'
import { pathOf } from './context'

// The request body policy (docs/api.md §0: JSON in and out, one error envelope): JSON only, at most MAX_JSON_BYTES, at most
// MAX_JSON_DEPTH levels deep; anything else is a 4xx in the envelope, never a 5xx.
//
// It is split by cost. `checkBodyHeaders` runs for every request before routing and decides from
// the headers alone (content type, declared length), so nothing oversized or of another type is
// ever read. Routes with a required JSON body then use Elysia's native parser (`parse: 'json'`,
// see `jsonBody`): a parse hook of our own made Elysia's generated handler add and delete a
// context property on every request, which cost about a fifth of the heartbeat's throughput.
// Optional bodies keep a strict parser of ours (`optionalJsonBody`): the native one silently
// drops a malformed optional body, which would turn e.g. a garbled key rotation request into
// "rotate every key". `checkJsonBody` runs before validation on whatever was parsed: every body of
// this API is a JSON object, and Elysia's validator would otherwise let another JSON value through
// (it skips an optional body that is not a non-empty object, and copies a required one onto `{}`).

export const MAX_JSON_BYTES = 4 * 1024 * 1024
// No request body of this API nests deeply; a hostile one must not reach the validator, whose error
// reporting recurses through the value (a 10,000-level array overflowed the stack).
export const MAX_JSON_DEPTH = 64

/**
 * The routes that stream a multipart body themselves (uploads of any size up to MAX_UPLOAD_BYTES).
 * Every other route takes JSON or nothing.
 */
export const STREAMING_UPLOAD_ROUTES = new Set(['POST /v1/files', 'POST /workers/upload-results'])

const isJson = (type: string) => type === 'application/json' || type.endsWith('+json')

/** The route key of a request: method and path, a trailing slash ignored as the router does. */
function routeKey(request: Request): string {
  const path = pathOf(request.url)
  return `${request.method} ${path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path}`
}

/**
 * Bad input is a 400 (docs/api.md §0): a NUL character (%00) is never part of an id, a cursor or a
 * query value, and PostgreSQL cannot compare one with a text column at all (docs/api.md §12: both
 * engines answer alike).
 */
export function checkUrl(request: Request): void {
  if (request.url.includes('%00')) throw badRequest('invalid_value', 'The URL contains a NUL character (%00)')
}

/** Headers-only checks, before routing and before a byte of the body is read. */
export function checkBodyHeaders(request: Request): void {
  const length = request.headers.get('content-length')
  // Over HTTP a body comes with a Content-Length or as chunks; a Request built in-process with a
  // stream has neither header, and is treated like chunks. A GET or HEAD cannot be built with one,
  // and is not asked: reading `request.body` costs a served request about a microsecond.
  const chunked =
    request.headers.has('transfer-encoding') ||
    (length === null && request.method !== 'GET' && request.method !== 'HEAD' && request.body !== null)
  if ((length === null || length === '0') && !chunked) return
  if (STREAMING_UPLOAD_ROUTES.has(routeKey(request))) return
  const type = (request.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase()
  if (!isJson(type)) {
    throw badRequest('unsupported_media_type', 'Request bodies must be JSON (Content-Type: application/json)')
  }
  if (length === null) {
    throw new AppError(411, 'length_required', 'JSON bodies need a Content-Length header')
  }
  if (Number(length) > MAX_JSON_BYTES) {
    throw tooLarge('request_too_large', `JSON bodies are limited to ${MAX_JSON_BYTES} bytes`)
  }
}

/** Route options for a required JSON body: Elysia's native parser, then the schema. */
export const jsonBody = <S>(schema: S) => ({ parse: 'json' as const, body: schema })

/**
 * Route options for an optional JSON body: an empty body is `{}` (the same request with every field
 * left out); malformed is a 400, never ignored.
 */
export const optionalJsonBody = <S>(schema: S) => ({ parse: parseOptionalJson, body: schema })

async function parseOptionalJson({ request }: { request: Request }): Promise<unknown> {
  const text = await request.text()
  // Not `undefined`: a parse hook returning it hands the body to Elysia's own parser.
  if (text.trim() === '') return {}
  try {
    return JSON.parse(text)
  } catch {
    throw badRequest('invalid_json', 'The request body is not valid JSON')
  }
}

/**
 * Refuses a parsed body that is not a JSON object (docs/api.md §0: bodies are validated by schema, and
 * every schema is an object; `null`, `42` or `1e309` is not "no body") or that nests deeper than
 * MAX_JSON_DEPTH (iterative: a deep value cannot overflow it). `undefined` is a route without a body.
 */
export function checkJsonBody(body: unknown): void {
  if (body === undefined) return
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw badRequest('invalid_body', 'The request body must be a JSON object')
  }
  const stack: [unknown, number][] = [[body, 1]]
  while (stack.length > 0) {
    const [value, depth] = stack.pop()!
    if (depth > MAX_JSON_DEPTH) {
      throw badRequest('invalid_json', `JSON bodies may nest at most ${MAX_JSON_DEPTH} levels`)
    }
    if (!Array.isArray(value) && Object.keys(value as object).some((k) => k.includes('\u0000'))) {
      throw badRequest('invalid_value', 'Strings in the request body may not contain NUL characters')
    }
    for (const child of Array.isArray(value) ? value : Object.values(value as object)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1])
      // PostgreSQL stores no NUL in text, and no field of the API needs one: a 400, on both engines.
      else if (typeof child === 'string' && child.includes('\u0000')) {
        throw badRequest('invalid_value', 'Strings in the request body may not contain NUL characters')
      }
    }
  }
}
