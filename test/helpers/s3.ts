import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { randomBase62 } from '../../src/lib/ids'

// An S3-compatible server for the tests: s3rver (npm) in a Node subprocess (s3rver-main.cjs says
// why), on loopback and a free port, storing under a temporary directory; stopped by its PID.
// Each caller gets its own key prefix in one bucket.

const BUCKET = 'gridkeep-test'

export interface S3Server {
  endpoint: string
  /** The environment that selects the S3 engine, under a fresh prefix. */
  env(): Record<string, string>
  close(): Promise<void>
}

export async function startS3Server(): Promise<S3Server> {
  const dir = mkdtempSync(join(tmpdir(), 'gridkeep-s3-'))
  const proc = Bun.spawn(
    ['node', '--openssl-legacy-provider', join(import.meta.dir, 's3rver-main.cjs'), dir, BUCKET],
    { stdin: 'pipe', stdout: 'pipe', stderr: 'inherit' },
  )
  const port = await firstPort(proc.stdout)
  const endpoint = `http://127.0.0.1:${port}`
  return {
    endpoint,
    env: () => s3Env(endpoint),
    async close() {
      proc.kill()
      await proc.exited
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

async function firstPort(out: ReadableStream<Uint8Array>): Promise<number> {
  let seen = ''
  const decoder = new TextDecoder()
  for await (const chunk of out) {
    seen += decoder.decode(chunk, { stream: true })
    const m = /port (\d+)/.exec(seen)
    if (m) return Number(m[1])
  }
  throw new Error(`s3rver did not start: ${seen}`)
}

/**
 * The environment that puts an app the helpers build (test/helpers/app.ts) on the S3 engine when
 * GK_TEST_S3_ENDPOINT names a running s3rver (`bun run test:s3` starts one and runs the file,
 * worker and validator suites against it), else nothing: the local engine.
 */
export function testStorageEnv(): Record<string, string> {
  const endpoint = process.env.GK_TEST_S3_ENDPOINT
  return endpoint ? s3Env(endpoint) : {}
}

const s3Env = (endpoint: string) => ({
  STORAGE_URL: `s3://${BUCKET}/t${randomBase62(10)}`,
  S3_ENDPOINT: endpoint,
  S3_REGION: 'us-east-1',
  // s3rver's built-in account.
  S3_ACCESS_KEY_ID: 'S3RVER',
  S3_SECRET_ACCESS_KEY: 'S3RVER',
})
