import { afterEach, describe, expect, test } from 'bun:test'
import { Api } from '../../src/client/api'
import { ClientError, EXIT } from '../../src/client/exit'

// docs/guide.md "The terminal client": a refused connection reached no server, so the client tries
// it once more after REFUSED_RETRY_MS, whatever the method (a renewed certificate's listener swap
// refuses connections for an instant, docs/deployment.md "TLS on the binary"); a streamed upload is
// not sent twice, and a server that stays away is reported after that one retry.

const servers: ReturnType<typeof Bun.serve>[] = []
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.stop(true)))
})

/** A port nothing listens on (taken from the OS, then let go). */
function closedPort(): number {
  const probe = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response() })
  const port = probe.port!
  probe.stop(true)
  return port
}

/** The API server that comes up on `port` when called: what the requests that reach it were. */
function comesUp(port: number) {
  const seen: string[] = []
  return {
    seen,
    start() {
      servers.push(
        Bun.serve({
          port,
          hostname: '127.0.0.1',
          async fetch(req) {
            seen.push(`${req.method} ${new URL(req.url).pathname} ${await req.text()}`.trim())
            return Response.json({ object: 'list', data: [] })
          },
        }),
      )
    },
  }
}

/** A client of `port`; `refusedOnce` runs when it hears the refusal, before its retry. */
function client(port: number, refusedOnce?: () => void) {
  const retries: string[] = []
  const api = new Api(`http://127.0.0.1:${port}`, 'gk-test-key', new AbortController().signal, {
    retrying: (method, path) => {
      retries.push(`${method} ${path}`)
      refusedOnce?.()
    },
  })
  return { api, retries }
}

const failure = (p: Promise<unknown>) =>
  p.then(
    () => 'answered',
    (e) => (e instanceof ClientError ? [e.exitCode, e.message] : e),
  )

describe('a refused connection', () => {
  test('is tried once more: a read reaches the server that came up meanwhile', async () => {
    const port = closedPort()
    const server = comesUp(port)
    // The server comes up the moment the client hears the refusal, before its retry.
    const { api, retries } = client(port, server.start)
    expect(await api.json('GET', '/v1/batches?limit=1')).toEqual({ object: 'list', data: [] })
    expect(retries).toEqual(['GET /v1/batches?limit=1'])
    expect(server.seen).toEqual(['GET /v1/batches'])
  })

  test('is tried once more whatever the method: nothing was received, so a POST is sent once', async () => {
    const port = closedPort()
    const server = comesUp(port)
    const { api, retries } = client(port, server.start)
    await api.json('POST', '/v1/batches', { body: { input_file_id: 'file-1' } })
    expect(retries).toEqual(['POST /v1/batches'])
    expect(server.seen).toEqual(['POST /v1/batches {"input_file_id":"file-1"}'])
  })

  test('only once: a server that stays away is reported as unreachable (exit 5) after one retry', async () => {
    const port = closedPort()
    const { api, retries } = client(port)
    const [code, message] = (await failure(api.json('GET', '/v1/models'))) as [number, string]
    expect(code).toBe(EXIT.unreachable)
    expect(message).toStartWith(`cannot reach http://127.0.0.1:${port}: `)
    expect(retries).toEqual(['GET /v1/models'])
  })

  test('a streamed upload is not sent again', async () => {
    const port = closedPort()
    const { api, retries } = client(port)
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('--b--\r\n'))
        controller.close()
      },
    })
    const outcome = await failure(
      api.send('POST', '/v1/files', {
        raw: { body, headers: { 'content-type': 'multipart/form-data; boundary=b' } },
      }),
    )
    expect((outcome as [number, string])[0]).toBe(EXIT.unreachable)
    expect(retries).toEqual([])
  })
})
