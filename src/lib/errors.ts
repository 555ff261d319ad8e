// One error type, mapped once into the docs/api.md §0 envelope by src/http/errors.ts. Thrown from
// services and plugins alike. The machine code lives in `errorCode`, not `code`: Elysia reads a
// `code` property on thrown errors as its own (ARCHITECTURE.md rule 5).

export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'conflict_error'
  | 'rate_limit_error'
  | 'server_error'

const TYPE_BY_STATUS: Record<number, ErrorType> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  409: 'conflict_error',
  411: 'invalid_request_error',
  413: 'invalid_request_error',
  429: 'rate_limit_error',
}

export class AppError extends Error {
  readonly type: ErrorType
  constructor(
    readonly status: number,
    readonly errorCode: string | null,
    message: string,
    readonly param: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message)
    this.type = TYPE_BY_STATUS[status] ?? 'server_error'
  }
}

export interface ErrorEnvelope {
  error: { message: string; type: ErrorType; code: string | null; param: string | null }
}

export const envelope = (e: AppError): ErrorEnvelope => ({
  error: { message: e.message, type: e.type, code: e.errorCode, param: e.param },
})

export const badRequest = (code: string, message: string, param: string | null = null) =>
  new AppError(400, code, message, param)
export const unauthorized = (code: string, message: string) => new AppError(401, code, message)
export const forbidden = (code: string, message: string) => new AppError(403, code, message)
export const notFound = (code: string, message: string, param: string | null = null) =>
  new AppError(404, code, message, param)
export const conflict = (code: string, message: string, param: string | null = null) =>
  new AppError(409, code, message, param)
export const tooLarge = (code: string, message: string) => new AppError(413, code, message)
export const rateLimited = (retryAfterSeconds: number) =>
  new AppError(429, 'rate_limit_exceeded', `Too many requests; retry in ${retryAfterSeconds} s`, null, {
    'retry-after': String(retryAfterSeconds),
  })
