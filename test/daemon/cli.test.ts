import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { runWorkerCommand } from '../../src/daemon/cli'
import { randomBase62 } from '../../src/lib/ids'
import { ownProcess } from '../helpers/children'
import { chatLines } from '../helpers/daemon'
import { startFakeControlPlane } from '../helpers/fake-control-plane'
import { startFakeRuntime } from '../helpers/fake-runtime'
import { captureLogLine, rememberSecret } from '../helpers/secrets'

// The daemon as an operator runs it: a separate process, configured by flags and environment.

const CLI = join(import.meta.dir, '../../src/daemon/cli.ts')
const dir = mkdtempSync(join(tmpdir(), 'gk-cli-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe('gridkeep worker CLI', () => {
  test('--help prints usage and returns 0; bad options return 2', async () => {
    expect(await runWorkerCommand(['--help'], {})).toBe(0)
    expect(await runWorkerCommand(['--server', 'http://x', '--runtime', 'openai'], {})).toBe(2)
    expect(await runWorkerCommand(['--nope'], {})).toBe(2)
    // docs/worker.md "What an engine sees": a daemon that starts engines takes no key in argv.
    const managed = ['--server', 'http://x', '--runtime', 'llama.cpp', '--models-dir', dir]
    expect(await runWorkerCommand([...managed, '--key', `gk-${'k'.repeat(40)}`], {})).toBe(2)
  })

  test('runs as its own process: JSON log lines, never the key; SIGTERM finishes the job and exits 0', async () => {
    const key = `gk-${randomBase62(40)}`
    rememberSecret(key)
    const cp = startFakeControlPlane({ key })
    const rt = startFakeRuntime({ models: ['m'], latencyMs: 20 })
    cp.addJob({ job_id: 'batch_cli', input: chatLines(40).join('\n'), model: 'm' })
    const proc = ownProcess(
      Bun.spawn(
        [
          'bun',
          CLI,
          '--runtime',
          'openai',
          '--runtime-url',
          rt.url,
          '--concurrency',
          '2',
          '--vram-gb',
          '8',
          '--poll-interval',
          '0.05',
          '--progress-interval',
          '0.1',
          '--state-dir',
          join(dir, 'state'),
        ],
        {
          env: { ...process.env, GRIDKEEP_SERVER: cp.url, GRIDKEEP_WORKER_KEY: key },
          stdout: 'pipe',
          stderr: 'pipe',
        },
      ),
    )
    try {
      await cp.waitFor(() => rt.requests > 3, 'the job running', 15_000)
      proc.kill('SIGTERM')
      expect(await proc.exited).toBe(0)
      const out = await new Response(proc.stdout).text()
      const err = await new Response(proc.stderr).text()
      const lines = out.split('\n').filter(Boolean)
      for (const l of lines) captureLogLine(l)
      // Not a terminal: every stdout line is a structured record.
      const records = lines.map((l) => JSON.parse(l))
      expect(records.some((r) => r.msg === 'registered')).toBe(true)
      expect(records.some((r) => r.msg === 'job completed' && r.job_id === 'batch_cli')).toBe(true)
      expect(out.includes(key) || err.includes(key)).toBe(false)
      expect(cp.uploads).toHaveLength(1)
      expect(cp.uploads[0]!.completed).toBe(40)
      expect(cp.heartbeats[0]).toMatchObject({ vram_total_gb: 8 })
    } finally {
      proc.kill('SIGKILL')
      await cp.stop()
      await rt.stop()
    }
  })

  test('llama.cpp run by the daemon: a models directory or a llama-server that is not there ends the start with exit code 1, saying which', async () => {
    const key = `gk-${randomBase62(40)}`
    rememberSecret(key)
    const run = async (extra: string[]) => {
      const proc = ownProcess(
        Bun.spawn(
          [
            'bun',
            CLI,
            '--server',
            'http://127.0.0.1:9',
            '--runtime',
            'llama.cpp',
            '--state-dir',
            join(dir, 'state-llama'),
            ...extra,
          ],
          { env: { ...process.env, GRIDKEEP_WORKER_KEY: key }, stdout: 'pipe', stderr: 'pipe' },
        ),
      )
      const code = await proc.exited
      for (const l of (await new Response(proc.stdout).text()).split('\n').filter(Boolean)) captureLogLine(l)
      return { code, err: await new Response(proc.stderr).text() }
    }
    const noDir = await run(['--models-dir', join(dir, 'no-such-models')])
    expect(noDir.code).toBe(1)
    expect(noDir.err).toContain(`--models-dir ${join(dir, 'no-such-models')}: no such directory`)
    const noBinary = await run(['--models-dir', dir, '--llama-server', join(dir, 'no-llama-server')])
    expect(noBinary.code).toBe(1)
    expect(noBinary.err).toContain(`${join(dir, 'no-llama-server')}: no such program`)
  })

  test('a key the server refuses ends the process with exit code 1', async () => {
    const cp = startFakeControlPlane({ key: `gk-${randomBase62(40)}` })
    const rt = startFakeRuntime({ models: ['m'] })
    const wrong = `gk-${randomBase62(40)}`
    rememberSecret(wrong)
    try {
      const proc = ownProcess(
        Bun.spawn(
          [
            'bun',
            CLI,
            '--server',
            cp.url,
            '--runtime',
            'openai',
            '--runtime-url',
            rt.url,
            '--state-dir',
            join(dir, 'state2'),
          ],
          { env: { ...process.env, GRIDKEEP_WORKER_KEY: wrong }, stdout: 'pipe', stderr: 'pipe' },
        ),
      )
      expect(await proc.exited).toBe(1)
      const out = await new Response(proc.stdout).text()
      for (const l of out.split('\n').filter(Boolean)) captureLogLine(l)
      expect(out).toContain('rejected the worker key')
    } finally {
      await cp.stop()
      await rt.stop()
    }
  })
})
