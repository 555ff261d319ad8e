import { log, setLogLevel } from '../lib/logger'
import { Agent } from './agent'
import { DAEMON_VERSION } from './client'
import { forbidDumps } from './dumpable'
import { GpuProbe, runCommand } from './gpu'
import { helpText, OptionsError, parseDaemonOptions } from './options'
import { startStatusView } from './status'

// `gridkeep worker …` (the dispatcher in src/cli.ts calls runWorkerCommand), also runnable directly:
// `bun run src/daemon/cli.ts --help`.
//
// Exit codes: 0 after a clean stop (SIGTERM, SIGINT, SIGHUP), 1 when the server refuses the worker
// for good (key revoked or rejected), another daemon holds the state directory, or an error nothing
// caught stopped it; 2 for bad options (--gpus naming a GPU nvidia-smi does not list among them).

/** After an error nothing caught, the longest wait for the stop before the engines are stopped anyway. */
const CRASH_STOP_MS = 30_000

export async function runWorkerCommand(
  argv: string[],
  env: Record<string, string | undefined> = process.env,
): Promise<number> {
  let parsed: Awaited<ReturnType<typeof parseDaemonOptions>>
  try {
    parsed = await parseDaemonOptions(argv, env)
  } catch (e) {
    if (e instanceof OptionsError) {
      console.error(`gridkeep worker: ${e.message}`)
      return 2
    }
    throw e
  }
  if (parsed.help) {
    console.log(helpText())
    return 0
  }
  const opts = parsed.options
  setLogLevel(opts.log_level)
  // docs/worker.md "What an engine sees": no process of the same user (an engine) reads the key
  // out of this one's memory or /proc/<pid>/environ.
  if (!forbidDumps() && process.platform === 'linux')
    log.warn('could not make the daemon non-dumpable (prctl); processes of its user can read its memory')
  // docs/worker.md "GPUs": --gpus names GPUs nvidia-smi lists, or the daemon does not start.
  const gpuProblem = await new GpuProbe(runCommand, opts.gpus).checkSelected()
  if (gpuProblem) {
    console.error(`gridkeep worker: ${gpuProblem}`)
    return 2
  }

  let agent: Agent
  try {
    agent = new Agent(opts)
  } catch (e) {
    console.error(`gridkeep worker: ${(e as Error).message}`)
    return 2
  }
  const stopView = startStatusView(agent, {
    tty: !!process.stdout.isTTY,
    logEverySeconds: Math.max(10, opts.progress_interval),
  })
  // docs/worker.md "Stopping": the first signal stops polling and lets running jobs finish within
  // the grace period; a second stops them at once. SIGHUP (the SSH session that started it ended)
  // is one of them: the daemon never ends without stopping its engines.
  let signals = 0
  const onSignal = () => agent.shutdown(++signals > 1)
  // An error nothing caught: the daemon's state is not to be trusted, so it stops at once (its jobs
  // are reported failed and requeued) and its engines with it; if that stop hangs too, the engines
  // are stopped directly.
  let crashed = false
  let crashTimer: ReturnType<typeof setTimeout> | undefined
  let stoppedAfterCrash: (code: number) => void = () => {}
  const crashStop = new Promise<number>((resolve) => {
    stoppedAfterCrash = resolve
  })
  const onCrash = (e: unknown) => {
    if (crashed) return
    crashed = true
    try {
      log.error('unexpected error; stopping', {
        error: e instanceof Error ? e.message : String(e),
        ...(e instanceof Error && e.stack ? { stack: e.stack } : {}),
      })
    } catch {}
    crashTimer = setTimeout(async () => {
      log.error('the stop did not end; stopping the engines')
      await agent.runtime.close?.().catch(() => {})
      stoppedAfterCrash(1)
    }, CRASH_STOP_MS)
    agent.shutdown(true)
  }
  const handlers = [
    ['SIGTERM', onSignal],
    ['SIGINT', onSignal],
    ['SIGHUP', onSignal],
    ['uncaughtException', onCrash],
    ['unhandledRejection', onCrash],
  ] as const
  for (const [event, handler] of handlers) process.on(event, handler)
  try {
    const runtime = opts.runtime_url
      ? `at ${opts.runtime_url}`
      : `run by the daemon on the models in ${opts.models_dir}`
    console.error(
      `gridkeep worker ${DAEMON_VERSION}: server ${opts.server}, runtime ${opts.engine} ${runtime}`,
    )
    const code = await Promise.race([agent.run(), crashStop])
    return crashed ? 1 : code
  } catch (e) {
    console.error(`gridkeep worker: ${(e as Error).message}`)
    return 1
  } finally {
    clearTimeout(crashTimer)
    stopView()
    for (const [event, handler] of handlers) process.off(event, handler)
  }
}

if (import.meta.main) process.exit(await runWorkerCommand(process.argv.slice(2)))
