import { Elysia, ValidationError } from 'elysia'
import { AppError, badRequest, envelope } from '../lib/errors'
import { log } from '../lib/logger'
import { requestFacts, withRequestId } from './context'

// Every non-2xx JSON response is the docs/api.md §0 envelope, mapped here and nowhere else. Elysia's own
// validation errors become 400 (not 422) with a message that names the field but never echoes the
// submitted value (it may be a password). Unexpected errors are logged and answered with a bare 500.

export function toAppError(error: unknown, code: string | number): AppError {
  if (error instanceof AppError) return error
  // Elysia wraps whatever the body parser throws in a ParseError; ours are AppErrors.
  if (error instanceof Error && error.cause instanceof AppError) return error.cause
  if (error instanceof ValidationError) return fromValidation(error)
  switch (code) {
    case 'NOT_FOUND':
      return new AppError(404, 'route_not_found', 'No such route')
    case 'PARSE':
      return badRequest('invalid_json', 'The request body could not be parsed')
    case 'INVALID_FILE_TYPE':
      return badRequest('invalid_file_type', 'Invalid file type')
  }
  if (databaseUnavailable(error)) {
    return new AppError(503, 'database_unavailable', 'The database cannot be reached; retry shortly', null, {
      'retry-after': '5',
    })
  }
  return new AppError(500, 'internal_error', 'Internal server error')
}

/**
 * docs/api.md §12: a database that went away (connection refused or cut, server shutting down) is a
 * 503 the client may retry, not a 500; the driver reconnects when it is back. drizzle wraps the
 * driver's error, so the cause chain is searched.
 */
export function databaseUnavailable(error: unknown): boolean {
  for (let e = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const { code, errno } = e as { code?: unknown; errno?: unknown }
    if (typeof code === 'string' && (code.startsWith('ERR_POSTGRES_CONNECTION') || code === 'ECONNREFUSED'))
      return true
    // SQLSTATE class 08 (connection exception) and 57P01–57P03 (shutdown, crash, cannot connect now).
    if (typeof errno === 'string' && (errno.startsWith('08') || /^57P0[123]$/.test(errno))) return true
  }
  return false
}

function fromValidation(error: ValidationError): AppError {
  if (error.type === 'response') return new AppError(500, 'internal_error', 'Internal server error')
  const first = (error.all as { path?: string; message?: string; schema?: any }[])[0]
  const param = (first?.path ?? '').replace(/^\//, '').replaceAll('/', '.') || null
  const where =
    error.type === 'query' ? 'query parameter' : error.type === 'params' ? 'path parameter' : 'field'
  if (!first || !param) return badRequest('invalid_body', `The request ${error.type} is invalid`, null)
  if (first.message === 'Unexpected property') {
    return badRequest('unknown_field', `Unknown ${where} '${param}'`, param)
  }
  if (first.message === 'Expected required property') {
    return badRequest('missing_field', `Missing required ${where} '${param}'`, param)
  }
  return badRequest('invalid_value', `Invalid ${where} '${param}': ${describe(first.schema)}`, param)
}

/** What a schema expects, in words, without quoting the rejected value. */
export function describe(schema: any): string {
  if (!schema) return 'invalid value'
  const members: any[] | undefined = schema.anyOf ?? schema.oneOf
  if (members) {
    if (members.every((m) => m.const !== undefined))
      return `must be one of ${members.map((m) => m.const).join(', ')}`
    const typed = members.find((m) => m.type && m.type !== 'string') ?? members[0]
    return describe(typed)
  }
  if (schema.const !== undefined) return `must be ${JSON.stringify(schema.const)}`
  switch (schema.type) {
    case 'string': {
      if (schema.format === 'email') return 'must be an email address'
      const parts = ['must be a string']
      if (schema.minLength) parts.push(`of at least ${schema.minLength} characters`)
      if (schema.maxLength) parts.push(`of at most ${schema.maxLength} characters`)
      if (schema.pattern) parts.push('in the expected format')
      return parts.join(' ')
    }
    case 'integer':
    case 'number': {
      const noun = schema.type === 'integer' ? 'an integer' : 'a number'
      if (schema.minimum !== undefined && schema.maximum !== undefined)
        return `must be ${noun} from ${schema.minimum} to ${schema.maximum}`
      if (schema.minimum !== undefined) return `must be ${noun} ≥ ${schema.minimum}`
      if (schema.maximum !== undefined) return `must be ${noun} ≤ ${schema.maximum}`
      return `must be ${noun}`
    }
    case 'boolean':
      return 'must be true or false'
    case 'array':
      return schema.maxItems ? `must be an array of at most ${schema.maxItems} items` : 'must be an array'
    case 'object':
      return 'must be an object'
    case 'null':
      return 'must be null'
  }
  return 'invalid value'
}

/**
 * The envelope answering `error`, with the request's id; a 5xx is logged (without the request's
 * values). Elysia's error hook answers with it, and so does the request lifecycle for a route
 * whose promise fails outside Elysia's reach (src/http/lifecycle.ts).
 */
export function errorResponse(error: unknown, code: string | number, request: Request): Response {
  const appError = toAppError(error, code)
  const id = requestFacts(request)?.id
  if (appError.errorCode === 'database_unavailable') {
    // The driver's own words only: drizzle's wrapper quotes the query and its parameters.
    const cause = error instanceof Error && error.cause instanceof Error ? error.cause : error
    log.warn('database unavailable', {
      request_id: id,
      reason: cause instanceof Error ? cause.message : null,
    })
  } else if (appError.status >= 500) {
    log.error('unhandled error', {
      request_id: id,
      error:
        error instanceof Error
          ? { name: error.name, message: error.message, stack: error.stack }
          : String(error),
    })
  }
  return new Response(JSON.stringify(envelope(appError)), {
    status: appError.status,
    headers: withRequestId(request, { 'content-type': 'application/json', ...appError.headers }),
  })
}

export const errorHandler = new Elysia({ name: 'http.errors' }).onError(
  { as: 'global' },
  ({ error, code, request, route }) => {
    // An error before the route's hooks ran (a body that does not parse) still names its route.
    const facts = requestFacts(request)
    if (facts && route) facts.route = route
    return errorResponse(error, code, request)
  },
)
