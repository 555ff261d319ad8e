import { afterAll } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Subprocess } from 'bun'
import { ownProcess } from './children'

// Real gridkeep processes for the operations tests (issue 6): started from source through the CLI,
// with stdout and stderr kept whole so a test can read every line the process ever wrote.

export const CLI = join(import.meta.dir, '../../src/cli.ts')

export const tempDir = (hint = 'ops') => mkdtempSync(join(tmpdir(), `gridkeep-${hint}-`))

/** Temporary data directories for one test file, removed after it. */
export function dataDirs(hint: string) {
  const dirs: string[] = []
  afterAll(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true })
  })
  return () => {
    const d = tempDir(hint)
    dirs.push(d)
    return d
  }
}

export interface ServerProcess {
  proc: Subprocess<'ignore', 'pipe', 'pipe'>
  url: string
  /** Everything written to stdout and stderr so far. */
  output(): string
  /** Resolves with the exit code. */
  exited: Promise<number>
  /** Waits until the output contains `text`. */
  waitFor(text: string, timeoutMs?: number): Promise<void>
}

export function baseEnv(dataDir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '',
    DATA_DIR: dataDir,
    PORT: '0',
    HOST: '127.0.0.1',
    ADMIN_PASSWORD: 'first-admin-password',
    LOG_LEVEL: 'info',
    // As in testConfig: the machine's own free space must not decide a test (docs/api.md §15).
    MIN_FREE_DISK_BYTES: '0',
    ...extra,
  }
}

/** Runs `bun src/cli.ts <args>`; with `serve` waits for the listening line. */
export async function spawnServer(env: Record<string, string>, args: string[] = ['serve']) {
  const proc = ownProcess(
    Bun.spawn(['bun', CLI, ...args], { env, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' }),
  )
  let text = ''
  const waiters = new Set<() => void>()
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder()
    for await (const chunk of stream) {
      text += decoder.decode(chunk, { stream: true })
      for (const w of waiters) w()
    }
  }
  const pumped = Promise.all([pump(proc.stdout), pump(proc.stderr)])
  const exited = proc.exited.then(async (code) => {
    await pumped
    for (const w of waiters) w()
    return code
  })
  let done = false
  void exited.then(() => {
    done = true
  })
  const waitFor = (needle: string, timeoutMs = 15_000) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        waiters.delete(check)
        reject(new Error(`timed out waiting for '${needle}'; output so far:\n${text}`))
      }, timeoutMs)
      const check = () => {
        if (text.includes(needle)) {
          clearTimeout(timer)
          waiters.delete(check)
          resolve()
        } else if (done) {
          clearTimeout(timer)
          waiters.delete(check)
          reject(new Error(`process exited before '${needle}'; output:\n${text}`))
        }
      }
      waiters.add(check)
      check()
    })
  const server: ServerProcess = { proc, url: '', output: () => text, exited, waitFor }
  return server
}

/** Starts `gridkeep serve` and returns once it listens, with its URL. */
export async function startServerProcess(env: Record<string, string>): Promise<ServerProcess> {
  const server = await spawnServer(env)
  await server.waitFor('"gridkeep listening"')
  const line = server
    .output()
    .split('\n')
    .find((l) => l.includes('"gridkeep listening"'))!
  server.url = JSON.parse(line).url
  return server
}

/** Parsed JSON log lines of a process's output (other lines are skipped). */
export function jsonLines(output: string): Record<string, any>[] {
  const out: Record<string, any>[] = []
  for (const line of output.split('\n')) {
    if (!line.startsWith('{')) continue
    try {
      out.push(JSON.parse(line))
    } catch {}
  }
  return out
}

/**
 * Per-test timeout for tests that start processes. bunfig.toml's `[test] timeout` is not read by
 * bun 1.4.5 (the default 5 s applies), and process starts are slow on a loaded 2-core machine.
 */
export const PROCESS_TEST_TIMEOUT = 60_000
