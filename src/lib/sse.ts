// Server-sent events framing (text/event-stream, WHATWG HTML §9.2). Payloads are JSON, which never
// contains a raw newline, so each event is one `data:` line. The reading side (SseParser) is the
// dashboard's and the terminal client's, which read the events with fetch.

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

export interface SseEvent {
  event: string
  data: string
}

/** Splits a stream of text into events. Comments (`: ping`) and ids are skipped. */
export class SseParser {
  private buffer = ''

  /** Feeds a chunk; returns the events it completed. */
  push(chunk: string): SseEvent[] {
    this.buffer += chunk
    const events: SseEvent[] = []
    for (;;) {
      const match = /\r\n\r\n|\n\n|\r\r/.exec(this.buffer)
      if (!match) return events
      const block = this.buffer.slice(0, match.index)
      this.buffer = this.buffer.slice(match.index + match[0].length)
      const event = parseBlock(block)
      if (event) events.push(event)
    }
  }
}

function parseBlock(block: string): SseEvent | null {
  let event = 'message'
  const data: string[] = []
  for (const line of block.split(/\r\n|\n|\r/)) {
    if (line === '' || line.startsWith(':')) continue
    const colon = line.indexOf(':')
    const field = colon < 0 ? line : line.slice(0, colon)
    let value = colon < 0 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (field === 'event') event = value
    else if (field === 'data') data.push(value)
  }
  return data.length ? { event, data: data.join('\n') } : null
}
