import { afterAll, beforeAll, expect, test } from 'bun:test'
import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { spawnSync } from 'bun'
import { eq } from 'drizzle-orm'
import type { Engine } from '../../scripts/llama-server'
import { alive, groupMembers } from '../../src/daemon/engines/child'
import type { DaemonOptions } from '../../src/daemon/options'
import type { TestServer } from '../helpers/app'
import { fastDeps, type RunningAgent, runAgent } from '../helpers/daemon'
import { makeGpuBox } from '../helpers/gpubox'
import { withRealEngine } from '../helpers/llama'
import {
  ENTRY,
  firstFailure,
  managedFleet,
  managedOptions,
  routerModels,
  startManagedSetup,
  stopDaemon,
} from '../helpers/managed'
import { rowsOf } from '../helpers/rows'
import { until } from '../helpers/until'

// The real llama.cpp router under the daemon's GPU placement and fault rules (docs/worker.md
// "GPUs", --load-timeout): the GPUs the model manager chose reach each model's preset section as
// llama.cpp devices, numbered in the router's CUDA_VISIBLE_DEVICES; a load that goes silent is given
// up and its model process ended; a router killed while a model loads leaves no model process.
//
// The engine here is llama.cpp's CPU build: it lists no device, so a model given `device = CUDA0`
// is refused by its own process ("invalid device: CUDA0"). What is checked is what reaches the
// router — its environment, the preset, the model's arguments — and that the refusal is the job's
// error in the engine's words. A load is held silent the way a stalled disk or driver would hold it:
// the CPU backend the model processes load (GGML_BACKEND_PATH) is swapped for a FIFO with no writer
// once the router runs, so a model process blocks opening it, saying nothing more.

const PATH = process.env.PATH

withRealEngine('the llama.cpp router on GPUs, and its loads held to a deadline', (engine: Engine) => {
  let server: TestServer
  let modelsDir: string
  const dir = mkdtempSync(join(tmpdir(), 'gk-llama-faults-'))

  beforeAll(async () => {
    ;({ server, modelsDir } = await startManagedSetup(dir, { LOG_LEVEL: 'info' }))
  })

  afterAll(async () => {
    process.env.PATH = PATH
    await server?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  const stateDirOf = (d: RunningAgent) => d.agent.state.dir
  const recordOf = (d: RunningAgent) =>
    JSON.parse(readFileSync(join(stateDirOf(d), 'engines', 'llama-router.json'), 'utf8')) as {
      pid: number
      env?: Record<string, string>
    }
  const environOf = (pid: number) =>
    Object.fromEntries(
      readFileSync(`/proc/${pid}/environ`, 'utf8')
        .split('\0')
        .filter(Boolean)
        .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
    )
  /** Once the router answers (it has loaded its backend). */
  const answering = (d: RunningAgent) =>
    until('the router answering', async () => (await fetch(`${d.agent.runtime.baseUrl}/models`)).ok)
  /** The model processes of the router `pid` (its group, the router left out). */
  const modelProcesses = (pid: number) => groupMembers(pid).filter((p) => p !== pid)

  /**
   * A `llama-server` whose model processes can be held: the router loads the CPU backend from
   * `backend` (a copy of the real one); hold() swaps it for a FIFO nobody writes to.
   */
  function holdableRouter(name: string) {
    const backend = join(dir, `${name}-backend.so`)
    copyFileSync(engine.routerEnv.GGML_BACKEND_PATH!, backend)
    const script = join(dir, `${name}-llama-server`)
    writeFileSync(
      script,
      [
        '#!/bin/sh',
        `export LD_LIBRARY_PATH='${engine.routerEnv.LD_LIBRARY_PATH}'`,
        `export GGML_BACKEND_PATH='${backend}'`,
        `exec '${engine.routerBinary}' "$@"`,
        '',
      ].join('\n'),
    )
    chmodSync(script, 0o755)
    return {
      script,
      hold() {
        rmSync(backend)
        expect(spawnSync(['mkfifo', backend]).exitCode).toBe(0)
      },
      release() {
        rmSync(backend)
        copyFileSync(engine.routerEnv.GGML_BACKEND_PATH!, backend)
      },
    }
  }

  function daemon(key: string, o: Partial<DaemonOptions> = {}, gpus = false): RunningAgent {
    return runAgent(
      managedOptions(server.url, key, engine, modelsDir, { concurrency: 2, ...o }),
      fastDeps(gpus ? { gpu: undefined } : {}),
    )
  }

  test('the GPUs chosen reach the router: its CUDA_VISIBLE_DEVICES, and each model’s device list in its preset', async () => {
    // Two simulated 24 GB GPUs; the daemon is given the second alone (--gpus 1).
    const box = makeGpuBox(join(dir, 'box'), [24, 24])
    process.env.PATH = box.path
    const f = await managedFleet(server)
    const d = daemon(f.key, { vram_gb: undefined, gpus: [1] }, true)
    let id = ''
    try {
      id = await f.submit(ENTRY.alpha, 2)
      const requeued = await until('the batch requeued', async () => {
        const b = await f.batch(id)
        return b.attempts >= 1 ? b : null
      })
      // The router sees GPU 1 alone, in nvidia-smi's order; in its numbering that GPU is CUDA0.
      const router = recordOf(d)
      expect(router.env).toEqual({ CUDA_DEVICE_ORDER: 'PCI_BUS_ID', CUDA_VISIBLE_DEVICES: '1' })
      expect(environOf(router.pid)).toMatchObject({
        CUDA_DEVICE_ORDER: 'PCI_BUS_ID',
        CUDA_VISIBLE_DEVICES: '1',
      })
      const preset = readFileSync(join(stateDirOf(d), 'engines', 'llama-router.ini'), 'utf8')
      expect(preset).toContain('[alpha]\nthreads = 1\nctx-size = 1024\ndevice = CUDA0\n')
      const args = (await routerModels(d.agent.runtime.baseUrl)).alpha!.args
      expect(args[args.indexOf('--device') + 1]).toBe('CUDA0')
      // This build has no CUDA device: the model's own process refuses it, and says so.
      expect(requeued.error).toStartWith('alpha failed to load: exit code 1: ')
      expect(requeued.error).toContain('invalid device: CUDA0')
    } finally {
      process.env.PATH = PATH
      await stopDaemon(d)
      // Batches are the whole server's: the next test's daemon would take it.
      if (id) {
        const { db, tables } = rowsOf(server.deps)
        await db.delete(tables.batches).where(eq(tables.batches.id, id))
      }
    }
  })

  test('a load silent past --load-timeout is given up: the router unloads it, its process is gone, the job says why', async () => {
    const router = holdableRouter('timeout')
    // The workers of the tests before, which host beta too, are offline by now: this daemon is the
    // only one that could serve it (what the batch's waiting reason reads).
    server.clock.advance(server.config.HEARTBEAT_TIMEOUT_SECONDS + 1)
    const f = await managedFleet(server)
    // Its polls are held on the server (wait_seconds), where the test sees them.
    const d = daemon(f.key, { llama_server: router.script, load_timeout: 1, poll_wait: 5 })
    try {
      await answering(d)
      router.hold()
      const id = await f.submit(ENTRY.beta, 2)
      const requeued = await until('the batch requeued', async () => {
        const b = await f.batch(id)
        return b.attempts >= 1 ? b : null
      })
      const gaveUp =
        /^beta failed to load: gave up loading beta after \d+ s \(no output for \d+ s, --load-timeout 1\); the engine's last lines: /
      expect(await firstFailure(id)).toMatch(gaveUp)
      // The daemon's next poll names beta among the models it does not load now (failed_models): held
      // on the server, it has not been handed the batch back, which waits with one attempt spent.
      await until('the daemon polling again', () => server.deps.pollWaiters.isPolling(d.agent.id!))
      expect(await f.batch(id)).toMatchObject({ status: 'validated', attempts: 1 })
      expect(requeued.error).toMatch(gaveUp)
      // Its heartbeats say so too: the worker row has beta load_failed, with why and until when.
      const row = await until('the worker row saying beta failed to load', async () => {
        const m = (await f.models(d.agent.id)).beta
        return m?.state === 'load_failed' ? m : null
      })
      expect(row.failure.error).toStartWith('gave up loading beta after ')
      expect(row.failure.failures).toBe(1)
      expect(row.failure.retry_at).toBeGreaterThan(server.clock.now())
      // The batch says why it waits.
      const waiting = (await f.batch(id)).waiting
      expect(waiting.reason).toBe('load_failed')
      expect(waiting.message).toStartWith(
        `Worker ${d.agent.opts.name} failed to load ${ENTRY.beta}: gave up loading beta after `,
      )
      const routerPid = recordOf(d).pid
      expect(modelProcesses(routerPid)).toEqual([])
      expect((await routerModels(d.agent.runtime.baseUrl)).beta!.value).toBe('unloaded')
      // The router itself serves on.
      expect(alive(routerPid)).toBe(true)
    } finally {
      await stopDaemon(d)
    }
  })

  test('the router SIGKILLed while a model loads: the model’s process goes with it, and the router is started again', async () => {
    const router = holdableRouter('kill')
    const f = await managedFleet(server)
    const d = daemon(f.key, { llama_server: router.script })
    try {
      await answering(d)
      const first = recordOf(d)
      router.hold()
      await f.submit(ENTRY.alpha, 2)
      const held = await until('a model process loading', () => {
        const left = modelProcesses(first.pid)
        return left.length ? left : null
      })
      process.kill(first.pid, 'SIGKILL')
      // The next router loads its backend as it starts: the real one again.
      router.release()
      await until('a new router', () => {
        const r = recordOf(d)
        return r.pid !== first.pid ? r : null
      })
      // Nothing of the killed router's group is left: its model process was ended with it.
      for (const pid of held) expect(alive(pid)).toBe(false)
      expect(groupMembers(first.pid)).toEqual([])
    } finally {
      await stopDaemon(d)
    }
  })
})
