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
    { stdout: 'pipe', stderr: 'inherit' },
  )
  const port = await firstPort(proc.stdout)
  const endpoint = `http://127.0.0.1:${port}`
  return {
    endpoint,
    env: () => ({
      STORAGE_URL: `s3://${BUCKET}/t${randomBase62(10)}`,
      S3_ENDPOINT: endpoint,
      S3_REGION: 'us-east-1',
      // s3rver's built-in account.
      S3_ACCESS_KEY_ID: 'S3RVER',
      S3_SECRET_ACCESS_KEY: 'S3RVER',
    }),
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

let shared: S3Server | undefined

/**
 * GK_TEST_STORAGE=s3 runs every app the helpers build (test/helpers/app.ts) on the S3 engine,
 * against one s3rver the preload starts for the whole run (it ends with the test process).
 */
export async function startSharedS3ServerIfAsked() {
  if (process.env.GK_TEST_STORAGE !== 's3' || shared) return
  shared = await startS3Server()
  const server = shared
  process.on('exit', () => void server.close())
}

/** The S3 environment when GK_TEST_STORAGE=s3, else nothing (the local engine). */
export const testStorageEnv = (): Record<string, string> => (shared ? shared.env() : {})
