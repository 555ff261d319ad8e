import { chmodSync, closeSync, existsSync, openSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import type { Subprocess } from 'bun'
import { ownProcess } from './children'
import { captureLogLine } from './secrets'

// `gridkeep worker` as its own process, for what only a process shows: signals, its environment
// reaching the engines it starts, the state directory's lock. With the stand-in engine of
// test/helpers/env-engine.ts as its llama.cpp router, which answers at once and needs no model.

const REPO = resolve(import.meta.dir, '../..')
export const WORKER_CLI = join(REPO, 'src/daemon/cli.ts')
export const ENV_ENGINE = join(REPO, 'test/helpers/env-engine.ts')

/** An executable `llama-server` in `dir` that runs the stand-in engine (a path for --llama-server). */
export function standInRouter(dir: string): string {
  const path = join(dir, 'llama-server')
  writeFileSync(path, `#!/bin/sh\nexec '${process.execPath}' '${ENV_ENGINE}' "$@"\n`)
  chmodSync(path, 0o755)
  return path
}

/**
 * What runs a process as an unprivileged user (nobody) when the tests run as root, whose
 * CAP_SYS_PTRACE reads any process's /proc files; nothing otherwise. Its files need to be nobody's.
 */
export const UNPRIVILEGED =
  process.getuid?.() === 0 ? ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'] : []
export const UNPRIVILEGED_UID = process.getuid?.() === 0 ? 65534 : (process.getuid?.() ?? 0)

export interface WorkerProcess {
  proc: Subprocess
  /** Everything it wrote so far (stdout and stderr). */
  output(): string
  /** Resolves with its exit code; its log lines are kept for the suite's secret check. */
  exited(): Promise<number>
}

/** Starts the daemon (`entry`: src/daemon/cli.ts, or a script that runs it) with exactly `env`. */
export function spawnWorker(
  args: string[],
  env: Record<string, string>,
  o: { outputDir: string; entry?: string; unprivileged?: boolean },
): WorkerProcess {
  const out = join(o.outputDir, `worker-${Date.now()}-${Math.random().toString(36).slice(2)}.log`)
  // One descriptor, appending, for both streams: two would each write from the file's start.
  const fd = openSync(out, 'a')
  const proc = ownProcess(
    Bun.spawn([...(o.unprivileged ? UNPRIVILEGED : []), process.execPath, o.entry ?? WORKER_CLI, ...args], {
      cwd: REPO,
      env,
      stdin: 'ignore',
      stdout: fd,
      stderr: fd,
    }),
  )
  closeSync(fd)
  const output = () => (existsSync(out) ? readFileSync(out, 'utf8') : '')
  return {
    proc,
    output,
    async exited() {
      const code = await proc.exited
      for (const l of output().split('\n').filter(Boolean)) captureLogLine(l)
      return code
    },
  }
}

/** What the stand-in engine wrote at its start (--dump): its pid, its worker's, its environment. */
export interface EngineDump {
  pid: number
  worker: number
  env: Record<string, string>
  /** Reading /proc/<pid>/environ of the daemon and of the engine's own worker: 'read' or the error code. */
  reads: { daemon: string; worker: string }
}

export function readDump(path: string): EngineDump | null {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as EngineDump
  } catch {
    return null
  }
}
