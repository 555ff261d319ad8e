import { setSystemTime } from 'bun:test'
import { Webhook } from 'standardwebhooks'

// A real webhook receiver on loopback (docs/api.md §13 tests): records every request and answers as the
// test says. Signatures are checked with the `standardwebhooks` package, an implementation
// independent of the server's.

export interface Received {
  headers: Record<string, string>
  body: string
  /** The Host header the request carried. */
  host: string
}

export type Answer = (n: number, req: Request) => Response | Promise<Response>

export function startReceiver(answer: Answer = () => new Response(null, { status: 204 })) {
  const received: Received[] = []
  const waiters = new Set<() => void>()
  let respond = answer
  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const body = await req.text()
      received.push({ headers: Object.fromEntries(req.headers), body, host: req.headers.get('host') ?? '' })
      for (const w of waiters) w()
      return respond(received.length, req)
    },
  })
  return {
    url: `http://127.0.0.1:${server.port}`,
    port: server.port!,
    received,
    /** Changes how later requests are answered. */
    answerWith(next: Answer) {
      respond = next
    },
    /** Resolves once `count` requests have arrived. */
    waitFor(count: number, timeoutMs = 20_000) {
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(check)
          reject(new Error(`receiver: ${received.length} of ${count} requests after ${timeoutMs} ms`))
        }, timeoutMs)
        const check = () => {
          if (received.length < count) return
          clearTimeout(timer)
          waiters.delete(check)
          resolve()
        }
        waiters.add(check)
        check()
      })
    },
    stop: () => server.stop(true),
  }
}

/**
 * Verifies a received request with the standardwebhooks package and returns its payload. `nowMs`
 * is the receiver's clock (the package refuses timestamps 5 minutes off it).
 */
export function verify(secret: string, r: Received, nowMs = Date.now()) {
  setSystemTime(new Date(nowMs))
  try {
    return new Webhook(secret).verify(r.body, r.headers) as {
      id: string
      type: string
      created_at: number
      data: { id: string }
    }
  } finally {
    setSystemTime()
  }
}
