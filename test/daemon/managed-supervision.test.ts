import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { spawnRouter } from '../../scripts/llama-server'
import { alive, freePort } from '../../src/daemon/engines/child'
import type { TestServer } from '../helpers/app'
import { ownProcess } from '../helpers/children'
import { withRealEngine } from '../helpers/llama'
import {
  ENTRY,
  managedFleet,
  managedOptions,
  routerModels,
  routersOf,
  runManaged,
  startManagedSetup,
  stopDaemon,
} from '../helpers/managed'
import { capturedLogLines, captureLogLine } from '../helpers/secrets'
import { until } from '../helpers/until'

// The daemon owns the engine it runs (docs/worker.md "Managed engines"): the router dies and is
// restarted while the jobs it held are requeued with its last lines; a daemon killed with SIGKILL
// leaves its router, which the next start adopts (same command) or stops (another) — never two
// for one state directory; and a router someone else runs is attached to, never stopped.

const CLI = join(import.meta.dir, '../../src/cli.ts')

withRealEngine('the daemon supervises the engine it runs', (engine) => {
  let server: TestServer
  let modelsDir: string
  const dir = mkdtempSync(join(tmpdir(), 'gk-managed-sup-'))

  beforeAll(async () => {
    ;({ server, modelsDir } = await startManagedSetup(dir, { LOG_LEVEL: 'info' }))
  })

  afterAll(async () => {
    await server?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  const recordOf = (stateDir: string) =>
    JSON.parse(readFileSync(join(stateDir, 'engines', 'llama-router.json'), 'utf8')) as {
      pid: number
      port: number
    }

  test('the router killed under a job: the job is reported with the engine’s account, the router restarts, the batch completes', async () => {
    const f = await managedFleet(server)
    const d = runManaged(managedOptions(server.url, f.key, engine, modelsDir, { concurrency: 2 }))
    try {
      const id = await f.submit(ENTRY.alpha, 80)
      await until('requests flowing', async () => (await f.batch(id)).request_counts.completed > 3)
      const first = recordOf(d.agent.state.dir).pid
      process.kill(first, 'SIGKILL')
      const requeued = await until('the failure reported', async () => {
        const b = await f.batch(id)
        return b.attempts === 1 ? b : null
      })
      expect(requeued.error).toContain('the engine was killed (SIGKILL)')
      expect(requeued.error).toContain('its last lines:')
      // Claimed again as soon as the router is back (the heartbeat that says so is not left for later).
      const done = await f.completed(id)
      expect(done.attempts).toBe(1)
      if (done.request_counts.failed)
        console.log(
          'ERRLINES',
          (await server.req('GET', `/v1/files/${done.error_file_id}/content`, { token: f.user.token })).text,
        )
      expect(done.request_counts).toEqual({ total: 80, completed: 80, failed: 0 })
      // Another process now, the only one of this state directory.
      const now = routersOf(d.agent.state.dir)
      expect(now).toHaveLength(1)
      expect(now[0]).not.toBe(first)
    } finally {
      await stopDaemon(d)
    }
    expect(routersOf(d.agent.state.dir)).toEqual([])
  })

  test('a daemon SIGKILLed while it loads a model: the next start adopts its router, no second one, and serves on; with another command it stops it', async () => {
    const f = await managedFleet(server)
    const stateDir = mkdtempSync(join(tmpdir(), 'gk-worker-'))
    const id = await f.submit(ENTRY.alpha, 4)
    const argv = (extra: string[] = []) => [
      'bun',
      CLI,
      'worker',
      '--server',
      server.url,
      '--runtime',
      'llama.cpp',
      '--models-dir',
      modelsDir,
      '--llama-server',
      engine.router,
      '--state-dir',
      stateDir,
      '--vram-gb',
      '1',
      '--poll-interval',
      '0.05',
      '--poll-wait',
      '0',
      ...extra,
    ]
    /** A daemon process, killed with SIGKILL at the first log line `at` accepts. */
    async function killedAt(at: (record: any) => boolean, extra: string[] = []) {
      const proc = ownProcess(
        Bun.spawn(argv(extra), {
          env: { ...process.env, GRIDKEEP_WORKER_KEY: f.key },
          stdout: 'pipe',
          stderr: 'pipe',
        }),
      )
      // Never left running: a daemon that never says the line is ended too (and the test fails).
      const bound = setTimeout(() => proc.kill('SIGKILL'), 30_000)
      const dec = new TextDecoder()
      let buf = ''
      let hit = false
      for await (const chunk of proc.stdout) {
        buf += dec.decode(chunk)
        let nl = buf.indexOf('\n')
        while (nl >= 0) {
          const line = buf.slice(0, nl)
          buf = buf.slice(nl + 1)
          nl = buf.indexOf('\n')
          captureLogLine(line)
          try {
            if (!hit && at(JSON.parse(line))) {
              hit = true
              proc.kill('SIGKILL')
            }
          } catch {}
        }
      }
      await proc.exited
      clearTimeout(bound)
      expect(hit).toBe(true)
      expect(proc.signalCode).toBe('SIGKILL')
    }

    try {
      // 1. Killed between asking for the model and its answer: its router runs on, orphaned.
      await killedAt((r) => typeof r.msg === 'string' && r.msg.startsWith(`loading alpha for job ${id}`))
      const [left] = routersOf(stateDir)
      expect(left).toBeDefined()
      expect(recordOf(stateDir).pid).toBe(left!)

      // 2. Started again with the same command: the same router, adopted; the batch (requeued by the
      //    re-registration) runs on it.
      const d = runManaged(managedOptions(server.url, f.key, engine, modelsDir, { state_dir: stateDir }))
      try {
        const done = await f.completed(id)
        expect(done.request_counts.completed).toBe(4)
        expect(routersOf(stateDir)).toEqual([left!])
        expect(capturedLogLines().some((l) => l.includes('adopted the engine a previous run left'))).toBe(
          true,
        )
        expect((await routerModels(d.agent.runtime.baseUrl)).alpha!.value).toBe('loaded')
      } finally {
        await stopDaemon(d)
      }
      // Adopted, then stopped with the daemon like its own.
      expect(alive(left!)).toBe(false)
      expect(routersOf(stateDir)).toEqual([])

      // 3. Killed again once its router runs; started with other router arguments: the leftover is
      //    stopped, a new one started.
      await killedAt((r) => r.msg === 'engine started')
      const [orphan] = routersOf(stateDir)
      expect(orphan).toBeDefined()
      const other = runManaged(
        managedOptions(server.url, f.key, engine, modelsDir, {
          state_dir: stateDir,
          engine_args: ['--threads-http', '4'],
        }),
      )
      try {
        await until('registered', () => other.agent.id)
        expect(alive(orphan!)).toBe(false)
        const now = routersOf(stateDir)
        expect(now).toHaveLength(1)
        expect(now[0]).not.toBe(orphan)
      } finally {
        await stopDaemon(other)
      }
      expect(routersOf(stateDir)).toEqual([])
    } finally {
      // Whatever a failed assertion left behind: this state directory's routers only.
      for (const pid of routersOf(stateDir)) process.kill(pid, 'SIGKILL')
      rmSync(stateDir, { recursive: true, force: true })
    }
  }, 90_000)

  test('attached to a router someone else runs: the daemon loads what jobs need, says once that params are not applied, and leaves the router running', async () => {
    const f = await managedFleet(server)
    const port = freePort()
    const router = ownProcess(spawnRouter(engine, modelsDir, port))
    const url = `http://127.0.0.1:${port}`
    try {
      await until('the router answering', async () => (await fetch(`${url}/models`).catch(() => null))?.ok)
      const logged = capturedLogLines().length
      const opts = managedOptions(server.url, f.key, engine, modelsDir, { runtime_url: url })
      delete opts.models_dir
      const d = runManaged(opts)
      try {
        for (const n of [3, 2]) {
          const done = await f.completed(await f.submit(ENTRY.beta, n))
          expect(done.request_counts.completed).toBe(n)
        }
        const status = (await routerModels(url)).beta!
        expect(status.value).toBe('loaded')
        // Its own settings: the profile's ctx_size is not there.
        expect(status.args).not.toContain('--ctx-size')
        const said = capturedLogLines()
          .slice(logged)
          .filter((l) => l.includes('serving-profile params are not applied'))
        expect(said).toHaveLength(1)
      } finally {
        await stopDaemon(d)
      }
      // Not the daemon's to stop.
      expect(router.exitCode).toBeNull()
      expect((await fetch(`${url}/models`)).ok).toBe(true)
    } finally {
      router.kill()
      await router.exited
    }
  })
})
