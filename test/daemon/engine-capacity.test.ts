import { afterEach, describe, expect, test } from 'bun:test'
import { randomBase62 } from '../../src/lib/ids'
import { chatLines, daemonOptions, fastDeps, runAgent } from '../helpers/daemon'
import { startFakeControlPlane } from '../helpers/fake-control-plane'
import { type FakeRuntimeOptions, startFakeRuntime } from '../helpers/fake-runtime'
import { rememberSecret } from '../helpers/secrets'

// --concurrency auto against a stand-in engine of fixed capacity (test/helpers/fake-runtime.ts:
// `slots` served at once, the rest queued, as llama-server does). What is asserted is where the
// daemon's concurrency goes, seen at the engine and in the heartbeats; never how fast it went.

const MODEL = 'Qwen/Qwen2.5-0.5B-Instruct'
let cleanups: (() => unknown)[] = []
afterEach(async () => {
  for (const c of cleanups.reverse()) await c()
  cleanups = []
})

function setup(rtOpts: FakeRuntimeOptions, o: Parameters<typeof daemonOptions>[3] = {}) {
  const key = `gk-${randomBase62(40)}`
  rememberSecret(key)
  const cp = startFakeControlPlane({ key })
  const rt = startFakeRuntime({ models: [MODEL], ...rtOpts })
  const running = runAgent(
    daemonOptions(cp.url, key, rt.url, { concurrency: 'auto', log_level: 'info', ...o }),
    fastDeps(),
  )
  cleanups.push(
    async () => {
      running.agent.shutdown(true)
      await running.done
    },
    () => cp.stop(),
    () => rt.stop(),
  )
  return { cp, rt, running }
}

describe('--concurrency auto against an engine of fixed slots', () => {
  test('at defaults it climbs from its small start to the engine’s 64 slots', async () => {
    // 150 ms per request keeps the engine's 430 requests/s within what a loaded 2-core test host
    // serves: the climb must be bounded by the engine, not by this process's CPU.
    const { cp, rt } = setup({ slots: 64, latencyMs: 150 })
    cp.addJob({ job_id: 'batch_wide', input: chatLines(1_600).join('\n'), model: MODEL })
    await cp.waitFor(() => cp.uploads.length === 1, 'the upload', 30_000)
    expect(cp.uploads[0]!.completed).toBe(1_600)
    const reported = cp.heartbeats.map((h) => h.concurrency as number)
    expect(reported[0]).toBe(8)
    expect(Math.max(...reported)).toBeGreaterThanOrEqual(48)
    expect(rt.maxInFlight).toBeGreaterThanOrEqual(48)
  })

  test('an engine that reports its slots (llama.cpp /props) is driven at them from its first job', async () => {
    const { cp, rt } = setup({ slots: 48, latencyMs: 40, llama: true })
    cp.addJob({ job_id: 'batch_llama', input: chatLines(300).join('\n'), model: MODEL })
    await cp.waitFor(() => cp.uploads.length === 1, 'the upload', 30_000)
    expect(rt.maxInFlight).toBeGreaterThanOrEqual(48)
    expect(cp.heartbeats.some((h) => h.concurrency >= 48)).toBe(true)
  })

  test('an engine answering 429 over 16 in flight: the daemon stays within it most of the time', async () => {
    const { cp, rt } = setup({ slots: 64, latencyMs: 40, refuseAbove: 16 }, { retries: 10 })
    cp.addJob({ job_id: 'batch_limited', input: chatLines(1_200).join('\n'), model: MODEL })
    await cp.waitFor(() => cp.uploads.length === 1, 'the upload', 30_000)
    expect(cp.uploads[0]!.completed).toBe(1_200)
    // It did meet the bound (so it was probing), and backed off from it.
    expect(rt.refused).toBeGreaterThan(0)
    expect(rt.refused / rt.requests).toBeLessThan(0.1)
    const during = cp.heartbeats.filter((h) => h.activity === 'busy').map((h) => h.concurrency as number)
    expect(during.filter((c) => c <= 16).length / during.length).toBeGreaterThan(0.8)
  })

  test('a pinned --concurrency is what the engine sees, whatever it could take', async () => {
    const { cp, rt } = setup({ slots: 64, latencyMs: 20 }, { concurrency: 6 })
    cp.addJob({ job_id: 'batch_pinned', input: chatLines(240).join('\n'), model: MODEL })
    await cp.waitFor(() => cp.uploads.length === 1, 'the upload', 30_000)
    expect(rt.maxInFlight).toBe(6)
    expect(new Set(cp.heartbeats.map((h) => h.concurrency))).toEqual(new Set([6]))
  })
})
