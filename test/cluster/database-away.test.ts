import { afterAll, expect } from 'bun:test'
import { type PostgresCluster, startPostgres } from '../../scripts/postgres'
import { startTestServer, type TestServer } from '../helpers/app'
import { jsonl, line, uploadForm } from '../helpers/batches'
import { postgres, testWith } from '../helpers/requires'

// docs/api.md §12: a PostgreSQL that goes away while the server runs gives 503 on the requests that need
// it (no crash, nothing half-written), and the server recovers by itself when it returns. Its own
// cluster: the suite's shared one must not go down.

let cluster: PostgresCluster
let server: TestServer
afterAll(async () => {
  await server?.stop()
  cluster?.stop()
})

testWith(
  postgres,
  'the database goes away: 503 with Retry-After, readiness fails, liveness holds; then it recovers',
  async () => {
    cluster = await startPostgres()
    server = await startTestServer({ DATABASE_URL: cluster.url })
    const email = 'away@example.test'
    const password = 'away-password-1'
    expect(
      (await server.req('POST', '/v1/auth/signup', { body: { email, password, full_name: 'A' } })).status,
    ).toBe(200)
    const token = (await server.req('POST', '/v1/auth/login', { body: { email, password } })).body
      .access_token
    const file = await server.req('POST', '/v1/files', {
      token,
      raw: uploadForm(jsonl([line('a', 'no-model')]), 'in.jsonl', 'batch'),
    })
    expect(file.status).toBe(200)

    cluster.pause()
    for (let i = 0; i < 3; i++) {
      // The first requests meet connections being cut, the next ones a refused connection.
      const me = await server.req('GET', '/v1/auth/me', { token })
      expect(me.status).toBe(503)
      expect(me.body.error).toMatchObject({ code: 'database_unavailable', type: 'server_error' })
      expect(me.headers.get('retry-after')).toBe('5')
    }
    const create = await server.req('POST', '/v1/batches', { token, body: { input_file_id: file.body.id } })
    expect(create.status).toBe(503)
    expect((await server.req('GET', '/readyz')).status).toBe(503)
    expect((await server.req('GET', '/healthz')).status).toBe(200)

    cluster.resume()
    let status = 0
    for (let i = 0; i < 50 && status !== 200; i++) {
      status = (await server.req('GET', '/v1/auth/me', { token })).status
      if (status !== 200) await Bun.sleep(100)
    }
    expect(status).toBe(200)
    expect((await server.req('GET', '/readyz')).status).toBe(200)
    // The batch refused during the outage was never half-created.
    expect((await server.req('GET', '/v1/batches', { token })).body.data).toEqual([])
    expect(
      (await server.req('POST', '/v1/batches', { token, body: { input_file_id: file.body.id } })).status,
    ).toBe(200)
  },
  60_000,
)
