import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Agent, type AgentDeps } from '../../src/daemon/agent'
import type { DaemonOptions } from '../../src/daemon/options'

// Builders for daemon tests: options with fast intervals, and an agent run in this process.

export function daemonOptions(
  server: string,
  key: string,
  runtimeUrl: string,
  o: Partial<DaemonOptions> = {},
): DaemonOptions {
  return {
    server,
    key,
    runtime: 'openai',
    runtime_url: runtimeUrl,
    engine: 'openai',
    name: 'test-worker',
    state_dir: mkdtempSync(join(tmpdir(), 'gk-worker-')),
    concurrency: 4,
    max_jobs: 1,
    vram_gb: 24,
    max_download_gb: 0,
    progress_interval: 0.05,
    poll_interval: 0.05,
    poll_wait: 0,
    request_timeout: 5,
    retries: 3,
    shutdown_grace: 5,
    model_files: {},
    log_level: 'debug',
    ...o,
  }
}

export const fastDeps = (o: AgentDeps = {}): AgentDeps => ({
  gpu: { sample: async () => null },
  backoff: { baseMs: 5, maxMs: 50 },
  requestBackoff: { baseMs: 1, maxMs: 5 },
  ...o,
})

export interface RunningAgent {
  agent: Agent
  /** Resolves with the exit code of run(). */
  done: Promise<number>
}

export function runAgent(opts: DaemonOptions, deps: AgentDeps = fastDeps()): RunningAgent {
  const agent = new Agent(opts, deps)
  return { agent, done: agent.run() }
}

/** Lines of a chat batch whose body.model is a catalogue slug. */
export const chatLines = (n: number, model = 'catalogue-slug', content = (i: number) => `prompt ${i}`) =>
  Array.from({ length: n }, (_, i) =>
    JSON.stringify({
      custom_id: `req-${i}`,
      method: 'POST',
      url: '/v1/chat/completions',
      body: { model, messages: [{ role: 'user', content: content(i) }], max_tokens: 8 },
    }),
  )
