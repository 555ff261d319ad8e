import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Agent, type AgentDeps, type AgentEvent } from '../../src/daemon/agent'
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
    capabilities: ['json_mode', 'vision', 'embeddings', 'logprobs'],
    name: 'test-worker',
    state_dir: mkdtempSync(join(tmpdir(), 'gk-worker-')),
    concurrency: 4,
    max_concurrency: 256,
    shards: true,
    max_jobs: 2,
    vram_gb: 24,
    load_timeout: 900,
    max_download_gb: 0,
    hub_url: 'http://127.0.0.1:9',
    progress_interval: 0.05,
    poll_interval: 0.05,
    poll_wait: 0,
    request_timeout: 5,
    retries: 3,
    shutdown_grace: 5,
    model_files: {},
    llama_server: 'llama-server',
    engine_args: [],
    engine_env: [],
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
  /** Every event the agent emitted, in order. */
  events: AgentEvent[]
  /**
   * Resolves with the first event from now on that matches (events, not time: a test that proves
   * something did not happen waits for the event that would have caused it).
   */
  next<E extends AgentEvent['type']>(
    type: E,
    match?: (e: Extract<AgentEvent, { type: E }>) => boolean,
  ): Promise<Extract<AgentEvent, { type: E }>>
}

export function runAgent(opts: DaemonOptions, deps: AgentDeps = fastDeps()): RunningAgent {
  const events: AgentEvent[] = []
  const waiters = new Set<(e: AgentEvent) => boolean>()
  const agent = new Agent(opts, {
    ...deps,
    onEvent: (e) => {
      events.push(e)
      for (const w of [...waiters]) if (w(e)) waiters.delete(w)
      deps.onEvent?.(e)
    },
  })
  return {
    agent,
    done: agent.run(),
    events,
    next: (type, match) =>
      new Promise((resolve) => {
        waiters.add((e) => {
          if (e.type !== type || (match && !match(e as never))) return false
          resolve(e as never)
          return true
        })
      }),
  }
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
