// A text/event-stream reader over fetch streaming: EventSource cannot send the Authorization
// header (docs/api.md §11), so the dashboard reads `GET /v1/batches/{id}/events` with fetch.

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

/** Reads every event of a response body until the server closes it or `signal` aborts. */
export async function readEvents(
  body: ReadableStream<Uint8Array>,
  onEvent: (e: SseEvent) => void,
  signal?: AbortSignal,
): Promise<void> {
  const parser = new SseParser()
  const reader = body
    .pipeThrough(new TextDecoderStream() as ReadableWritablePair<string, Uint8Array>)
    .getReader()
  const cancel = () => void reader.cancel().catch(() => {})
  signal?.addEventListener('abort', cancel, { once: true })
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) return
      for (const e of parser.push(value)) onEvent(e)
    }
  } finally {
    signal?.removeEventListener('abort', cancel)
  }
}
