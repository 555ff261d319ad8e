// Server-sent events framing (text/event-stream, WHATWG HTML §9.2). Payloads are JSON, which never
// contains a raw newline, so each event is one `data:` line.

const encoder = new TextEncoder()

/** `event: <name>` + `data: <json>` + blank line. */
export const sseEvent = (name: string, data: unknown): Uint8Array =>
  encoder.encode(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`)

/** A comment line (`: <text>`), ignored by clients; keeps idle proxies from closing the stream. */
export const sseComment = (text: string): Uint8Array => encoder.encode(`: ${text}\n\n`)

export const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  connection: 'keep-alive',
  // nginx buffers responses by default; an event stream must reach the client as it is written.
  'x-accel-buffering': 'no',
} as const
