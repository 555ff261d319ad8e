// A small text/event-stream client over fetch for tests: reads frames as they arrive.

export interface SseFrame {
  event?: string
  data?: any
  comment?: string
}

export interface SseClient {
  response: Response
  /** The next frame, or null when the server closed the stream. */
  next(): Promise<SseFrame | null>
  /** Frames until (and including) the first whose event is `event`, skipping comments. */
  until(event: string): Promise<SseFrame[]>
  /** Frames until the server closes the stream (comments skipped). */
  rest(): Promise<SseFrame[]>
  close(): void
}

export async function openSse(url: string, token?: string): Promise<SseClient> {
  const abort = new AbortController()
  const response = await fetch(url, {
    headers: token ? { authorization: `Bearer ${token}` } : {},
    signal: abort.signal,
  })
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  let buffer = ''
  let ended = false
  const next = async (): Promise<SseFrame | null> => {
    for (;;) {
      const end = buffer.indexOf('\n\n')
      if (end >= 0) {
        const raw = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        const frame: SseFrame = {}
        for (const l of raw.split('\n')) {
          if (l.startsWith(':')) frame.comment = l.slice(1).trim()
          else if (l.startsWith('event: ')) frame.event = l.slice(7)
          else if (l.startsWith('data: ')) frame.data = JSON.parse(l.slice(6))
        }
        return frame
      }
      if (ended) return null
      const { done, value } = await reader.read()
      if (done) ended = true
      else buffer += decoder.decode(value, { stream: true })
    }
  }
  const events = async (stopAt?: string) => {
    const out: SseFrame[] = []
    for (;;) {
      const f = await next()
      if (!f) return out
      if (f.comment !== undefined) continue
      out.push(f)
      if (stopAt && f.event === stopAt) return out
    }
  }
  return {
    response,
    next,
    until: (event) => events(event),
    rest: () => events(),
    close: () => abort.abort(),
  }
}
