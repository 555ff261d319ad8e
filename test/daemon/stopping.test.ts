import { afterAll, describe, expect, test } from 'bun:test'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { alive } from '../../src/daemon/engines/child'
import { randomBase62 } from '../../src/lib/ids'
import { startFakeControlPlane } from '../helpers/fake-control-plane'
import { startFakeRuntime } from '../helpers/fake-runtime'
import { rememberSecret } from '../helpers/secrets'
import { until } from '../helpers/until'
import { readDump, spawnWorker, standInRouter, WORKER_CLI } from '../helpers/worker-process'

// How the daemon ends (docs/worker.md "Stopping" and "One daemon per state directory"), as its own
// process: SIGHUP and an error nothing caught stop it as SIGTERM does, its engines with it; one
// daemon per state directory, held by a kernel lock that ends with its holder.

const dir = mkdtempSync(join(tmpdir(), 'gk-stopping-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const key = `gk-${randomBase62(40)}`
rememberSecret(key)
const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, GRIDKEEP_WORKER_KEY: key }

/** The live processes of the group `pgid` (/proc: a zombie, ended and not yet reaped, is not one). */
function groupLeft(pgid: number): number[] {
  const left: number[] = []
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
      if (Number(pgrp) === pgid && state !== 'Z') left.push(Number(pid))
    } catch {}
  }
  return left
}

/** A daemon running the stand-in router (which starts a worker of its own in its process group). */
function routerDaemon(cpUrl: string, entry?: string) {
  const work = mkdtempSync(join(dir, 'router-'))
  mkdirSync(join(work, 'models'))
  const worker = spawnWorker(
    [
      '--server',
      cpUrl,
      '--runtime',
      'llama.cpp',
      '--models-dir',
      join(work, 'models'),
      '--llama-server',
      standInRouter(work),
      '--engine-args',
      `--dump ${work}`,
      '--state-dir',
      join(work, 'state'),
      '--poll-interval',
      '0.05',
      '--poll-wait',
      '0',
    ],
    env,
    { outputDir: work, ...(entry ? { entry } : {}) },
  )
  return { worker, engine: () => until('the router started', () => readDump(join(work, 'router.json'))) }
}

describe('stopping', () => {
  test('SIGHUP (the session that started it ended): the engine’s whole process group is stopped and the daemon exits 0', async () => {
    const cp = startFakeControlPlane({ key })
    const { worker, engine } = routerDaemon(cp.url)
    try {
      const { pid, worker: enginesWorker } = await engine()
      await cp.waitFor(() => cp.polls > 0, 'the daemon polling')
      expect(groupLeft(pid)).toContain(enginesWorker)
      worker.proc.kill('SIGHUP')
      expect(await worker.exited()).toBe(0)
      expect(alive(pid)).toBe(false)
      // Killed by the daemon before it exited; the kernel ends them as it gets to them.
      await until('the engine’s group gone', () => groupLeft(pid).length === 0)
    } finally {
      worker.proc.kill('SIGKILL')
      await cp.stop()
    }
  })

  // The daemon as `gridkeep worker` runs it, with an error planted in its process on a signal: one
  // thrown where nothing catches it (SIGUSR2), a promise rejected with nobody waiting (SIGUSR1).
  const planted = join(dir, 'planted-error.ts')
  writeFileSync(
    planted,
    [
      `import { runWorkerCommand } from ${JSON.stringify(WORKER_CLI)}`,
      `process.on('SIGUSR2', () => { throw new Error('planted error') })`,
      `process.on('SIGUSR1', () => { void Promise.reject(new Error('planted rejection')) })`,
      'process.exit(await runWorkerCommand(process.argv.slice(2)))',
    ].join('\n'),
  )

  for (const [signal, what] of [
    ['SIGUSR2', 'planted error'],
    ['SIGUSR1', 'planted rejection'],
  ] as const)
    test(`an error nothing caught (${what}): logged, the engines stopped, the daemon exits 1`, async () => {
      const cp = startFakeControlPlane({ key })
      const { worker, engine } = routerDaemon(cp.url, planted)
      try {
        const { pid, worker: enginesWorker } = await engine()
        await cp.waitFor(() => cp.polls > 0, 'the daemon polling')
        expect(groupLeft(pid)).toContain(enginesWorker)
        worker.proc.kill(signal)
        expect(await worker.exited()).toBe(1)
        const line = worker
          .output()
          .split('\n')
          .find((l) => l.includes('unexpected error; stopping'))
        expect(JSON.parse(line!)).toMatchObject({ level: 'error', error: what })
        expect(alive(pid)).toBe(false)
        await until('the engine’s group gone', () => groupLeft(pid).length === 0)
      } finally {
        worker.proc.kill('SIGKILL')
        await cp.stop()
      }
    })
})

describe('one daemon per state directory', () => {
  test('two started together: exactly one runs, the other exits 1 at once naming it; once that one is SIGKILLed the directory is free at once', async () => {
    const cp = startFakeControlPlane({ key })
    const rt = startFakeRuntime({ models: ['m'] })
    const state = join(dir, 'shared-state')
    const args = [
      '--server',
      cp.url,
      '--runtime',
      'openai',
      '--runtime-url',
      rt.url,
      '--state-dir',
      state,
      '--poll-interval',
      '0.05',
      '--poll-wait',
      '0',
    ]
    const start = () => spawnWorker(args, env, { outputDir: dir })
    const both = [start(), start()]
    let next: ReturnType<typeof start> | null = null
    try {
      const loser = await Promise.race(both.map((w) => w.exited().then((code) => ({ w, code }))))
      const winner = both.find((w) => w !== loser.w)!
      expect(loser.code).toBe(1)
      const refusal = loser.w.output()
      expect(refusal).toMatch(
        new RegExp(
          `gridkeep worker: another daemon \\(pid ${winner.proc.pid}, started \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z\\) uses the state directory ${state}: stop it, or give this one its own --state-dir`,
        ),
      )
      await cp.waitFor(() => cp.polls > 0, 'the winner polling')
      expect(winner.proc.exitCode).toBeNull()
      expect(cp.registrations).toHaveLength(1)

      // A crash: the kernel drops the lock with its holder, whatever its pid file said.
      winner.proc.kill('SIGKILL')
      await winner.proc.exited
      next = start()
      await cp.waitFor(() => cp.registrations.length === 2, 'the next daemon registered')
      expect(next.proc.exitCode).toBeNull()
      next.proc.kill('SIGTERM')
      expect(await next.exited()).toBe(0)
    } finally {
      for (const w of [...both, next]) w?.proc.kill('SIGKILL')
      await cp.stop()
      await rt.stop()
    }
  })
})
