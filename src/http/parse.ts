import { badRequest, tooLarge } from '../lib/errors'

// The one body parser (issue 2 "Errors"): JSON only. Bodies of other types are a 400, never
// silently read as form fields. multipart/form-data is left untouched for the upload routes, which
// stream `request.body` themselves (Elysia would otherwise buffer the whole upload in memory).

export const MAX_JSON_BYTES = 4 * 1024 * 1024
// No request body of this API nests deeply; a hostile one must not reach the validator, whose error
// reporting recurses through the value (a 10,000-level array overflowed the stack).
export const MAX_JSON_DEPTH = 64

/** Returned as the parsed body of multipart requests: an empty object, so a JSON route given
 * multipart fails its schema with a 400, while streaming routes ignore it and read the stream. */
export const UNPARSED_MULTIPART = Object.freeze({})

export async function parseBody(request: Request, contentType: string): Promise<unknown> {
  const type = contentType.split(';')[0]!.trim().toLowerCase()
  if (type === 'multipart/form-data') return UNPARSED_MULTIPART
  if (type === 'application/json' || type.endsWith('+json')) {
    const text = await readTextCapped(request, MAX_JSON_BYTES)
    if (text.trim() === '') return null
    if (jsonDepthExceeds(text, MAX_JSON_DEPTH)) {
      throw badRequest('invalid_json', `JSON bodies may nest at most ${MAX_JSON_DEPTH} levels`)
    }
    try {
      return JSON.parse(text)
    } catch {
      throw badRequest('invalid_json', 'The request body is not valid JSON')
    }
  }
  if (request.body !== null) {
    throw badRequest('unsupported_media_type', 'Request bodies must be JSON (Content-Type: application/json)')
  }
  return undefined
}

async function readTextCapped(request: Request, cap: number): Promise<string> {
  const length = request.headers.get('content-length')
  const declared = Number(length ?? 0)
  if (declared > cap) throw tooLarge('request_too_large', `JSON bodies are limited to ${cap} bytes`)
  if (!request.body) return ''
  // A declared length bounds the body already: read it natively (the chunk loop below costs ~30×
  // more on a 1 KB heartbeat). Chunked bodies keep the capped loop.
  if (length !== null && /^\d+$/.test(length)) return request.text()
  const chunks: Uint8Array[] = []
  let size = 0
  for await (const chunk of request.body) {
    size += chunk.byteLength
    if (size > cap) throw tooLarge('request_too_large', `JSON bodies are limited to ${cap} bytes`)
    chunks.push(chunk)
  }
  return new TextDecoder('utf-8', { fatal: false }).decode(Buffer.concat(chunks))
}

/** True when the JSON text nests deeper than `max`; a linear scan that skips string contents. */
export function jsonDepthExceeds(text: string, max: number): boolean {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92 /* \\ */) i++
      else if (c === 34 /* " */) inString = false
    } else if (c === 34) inString = true
    else if (c === 123 || c === 91 /* { [ */) {
      if (++depth > max) return true
    } else if (c === 125 || c === 93 /* } ] */) depth--
  }
  return false
}
