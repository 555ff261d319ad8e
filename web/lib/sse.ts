// A text/event-stream reader over fetch streaming: EventSource cannot send the Authorization
// header (docs/api.md §11), so the dashboard reads `GET /v1/batches/{id}/events` with fetch.

import { type SseEvent, SseParser } from '../../src/lib/sse'

// The parser is the one the terminal client uses too (src/lib/sse.ts).
export { type SseEvent, SseParser }

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
