import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { startTestServer, type TestServer } from '../helpers/app'
import { capturedLogLines } from '../helpers/secrets'

// docs/api.md §11: the dashboard is served by the real (listening) server at `/`, under `/app/` and at
// `/reset-password`, with a CSP, a request id, a log line and metrics like any other route; API
// paths keep their JSON 404; `/docs` loads its UI from the server itself.

let server: TestServer
beforeAll(async () => {
  server = await startTestServer()
})
afterAll(() => server.stop())

const get = (path: string, headers: Record<string, string> = {}) => fetch(server.url + path, { headers })

async function pageAssets(): Promise<string[]> {
  const html = await (await get('/')).text()
  return [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!)
}

describe('the page', () => {
  test.each(['/', '/app', '/app/batches', '/app/batches/batch_x/anything', '/reset-password?token=abc'])(
    'GET %s is the dashboard with its CSP and a request id',
    async (path) => {
      const res = await get(path)
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toStartWith('text/html')
      expect(res.headers.get('content-security-policy')).toContain("default-src 'self'")
      expect(res.headers.get('x-request-id')).toMatch(/^req_/)
      const html = await res.text()
      expect(html).toContain('<div id="root"></div>')
      // docs/api.md §11: no inline script.
      expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/)
    },
  )

  test('every script and stylesheet is local, under /assets/, and served with its type', async () => {
    const assets = await pageAssets()
    expect(assets.length).toBeGreaterThanOrEqual(2)
    const types = new Set<string>()
    for (const path of assets) {
      expect(path).toStartWith('/assets/')
      const res = await get(path)
      expect(res.status).toBe(200)
      expect(res.headers.get('x-request-id')).toMatch(/^req_/)
      expect(res.headers.get('cache-control')).toContain('immutable')
      types.add(res.headers.get('content-type')!.split(';')[0]!)
      expect((await res.arrayBuffer()).byteLength).toBeGreaterThan(0)
    }
    expect(types).toContain('text/javascript')
    expect(types).toContain('text/css')
  })

  test('issue 9 budget: all JS+CSS of the page is at most 150 KB gzipped', async () => {
    let gz = 0
    for (const path of await pageAssets())
      if (/\.(js|css)$/.test(path))
        gz += Bun.gzipSync(new Uint8Array(await (await get(path)).arrayBuffer())).byteLength
    console.log(
      `dashboard JS+CSS: ${(gz / 1024).toFixed(1)} KB gzipped (bun run bench/dashboard.ts for details)`,
    )
    expect(gz).toBeGreaterThan(0)
    expect(gz).toBeLessThanOrEqual(150 * 1024)
  })

  test('an unknown asset is a 404 in the error envelope', async () => {
    const res = await get('/assets/nope.js')
    expect(res.status).toBe(404)
    expect(((await res.json()) as any).error.type).toBe('not_found_error')
  })

  test('the page is logged and counted like any route, with the id the client sent', async () => {
    const id = `dash-${Date.now()}`
    expect((await get('/app/workers', { 'x-request-id': id })).headers.get('x-request-id')).toBe(id)
    const lines = capturedLogLines()
      .filter((l) => l.includes(id))
      .map((l) => JSON.parse(l))
      .filter((l) => l.msg === 'request')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatchObject({ route: '/app/*', path: '/app/workers', status: 200 })
    const metrics = await (await get('/metrics')).text()
    expect(metrics).toMatch(
      /gridkeep_http_requests_total\{method="GET",route="\/app\/\*",status="200"\} [1-9]/,
    )
  })
  test('the reset page is logged without its token', async () => {
    const id = `dash-reset-${Date.now()}`
    const token = `reset-token-${crypto.randomUUID()}`
    expect((await get(`/reset-password?token=${token}`, { 'x-request-id': id })).status).toBe(200)
    const lines = capturedLogLines().filter((l) => l.includes(id))
    expect(lines.length).toBeGreaterThan(0)
    expect(JSON.parse(lines[0]!).path).toBe('/reset-password')
    expect(capturedLogLines().some((l) => l.includes(token))).toBe(false)
  })
})

describe('API paths keep their JSON 404', () => {
  test.each(['/v1/nope', '/v1/batches/x/y/z', '/workers/nope', '/nope', '/app.js'])(
    'GET %s',
    async (path) => {
      const res = await get(path)
      expect(res.status).toBe(404)
      expect(res.headers.get('content-type')).toContain('application/json')
      expect(((await res.json()) as any).error.type).toBe('not_found_error')
    },
  )
})

describe('/docs', () => {
  test('loads its UI script from this server, not a CDN', async () => {
    const html = await (await get('/docs')).text()
    const scripts = [...html.matchAll(/<script[^>]*\bsrc="([^"]+)"/g)].map((m) => m[1]!)
    expect(scripts).toEqual(['/docs/assets/api-reference.js'])
    expect(html).not.toMatch(/https?:\/\/(?!localhost)[^"'\s]*\.(js|css)/)
    const script = await get(scripts[0]!)
    expect(script.status).toBe(200)
    expect(script.headers.get('content-type')).toStartWith('text/javascript')
    expect((await script.arrayBuffer()).byteLength).toBeGreaterThan(100_000)
  })
})
