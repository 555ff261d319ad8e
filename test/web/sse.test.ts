import { describe, expect, test } from 'bun:test'
import { readEvents, SseParser } from '../../web/lib/sse'

// The dashboard's text/event-stream reader (docs/api.md §11: fetch streaming, not EventSource).

describe('SseParser', () => {
  test('events split across chunks at any byte come out whole, in order', () => {
    const stream =
      'event: status\ndata: {"batch_id":"b","status":"validating"}\n\n: ping\n\n' +
      'event: progress\ndata: {"lines_read":3}\n\nevent: done\ndata: {"status":"validated"}\n\n'
    for (let size = 1; size <= stream.length; size++) {
      const p = new SseParser()
      const events = []
      for (let i = 0; i < stream.length; i += size) events.push(...p.push(stream.slice(i, i + size)))
      expect(events.map((e) => e.event)).toEqual(['status', 'progress', 'done'])
      expect(JSON.parse(events[1]!.data)).toEqual({ lines_read: 3 })
    }
  })

  test('comments and blocks without data are skipped; CRLF and multi-line data are read', () => {
    const p = new SseParser()
    expect(p.push(': ping\n\n')).toEqual([])
    expect(p.push('event: error\r\ndata: a\r\ndata: b\r\n\r\n')).toEqual([{ event: 'error', data: 'a\nb' }])
    expect(p.push('data:x\n\n')).toEqual([{ event: 'message', data: 'x' }])
    expect(p.push('event: lonely\n\n')).toEqual([])
  })

  test('an incomplete event waits for its blank line', () => {
    const p = new SseParser()
    expect(p.push('event: done\ndata: {}\n')).toEqual([])
    expect(p.push('\n')).toEqual([{ event: 'done', data: '{}' }])
  })
})

describe('readEvents', () => {
  const body = (chunks: string[]) =>
    new ReadableStream<Uint8Array>({
      start(c) {
        for (const chunk of chunks) c.enqueue(new TextEncoder().encode(chunk))
        c.close()
      },
    })

  test('reads every event until the server closes the stream, multi-byte characters split included', async () => {
    const bytes = new TextEncoder().encode('event: error\ndata: {"message":"é"}\n\nevent: done\ndata: {}\n\n')
    const split = new ReadableStream<Uint8Array>({
      start(c) {
        // Cut inside the two-byte "é".
        const cut = bytes.indexOf(0xc3) + 1
        c.enqueue(bytes.slice(0, cut))
        c.enqueue(bytes.slice(cut))
        c.close()
      },
    })
    const seen: string[] = []
    await readEvents(split, (e) => seen.push(`${e.event}:${e.data}`))
    expect(seen).toEqual(['error:{"message":"é"}', 'done:{}'])
    const plain: string[] = []
    await readEvents(body(['data: 1\n\n', 'data: 2\n\n']), (e) => plain.push(e.data))
    expect(plain).toEqual(['1', '2'])
  })

  test('an abort ends the read of a stream the server keeps open', async () => {
    let cancelled!: () => void
    const sourceCancelled = new Promise<void>((resolve) => {
      cancelled = resolve
    })
    const open = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new TextEncoder().encode('event: status\ndata: {}\n\n'))
      },
      cancel() {
        cancelled()
      },
    })
    const abort = new AbortController()
    const seen: string[] = []
    const reading = readEvents(
      open,
      (e) => {
        seen.push(e.event)
        abort.abort()
      },
      abort.signal,
    )
    await reading
    expect(seen).toEqual(['status'])
    // The cancel reaches the response body (the connection is released); a missing one times out.
    await sourceCancelled
  })
})
