import { setLogLevel } from '../lib/logger'
import { Agent } from './agent'
import { DAEMON_VERSION } from './client'
import { helpText, OptionsError, parseDaemonOptions } from './options'
import { startStatusView } from './status'

// `gridkeep worker …` (the dispatcher in src/cli.ts calls runWorkerCommand), also runnable directly:
// `bun run src/daemon/cli.ts --help`.
//
// Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 1 when the server refuses the worker for good
// (key revoked or rejected), 2 for bad options.

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
  // First signal: stop polling, let running jobs finish within the grace period. Second: at once.
  let signals = 0
  const onSignal = () => agent.shutdown(++signals > 1)
  process.on('SIGTERM', onSignal)
  process.on('SIGINT', onSignal)
  try {
    const runtime = opts.runtime_url
      ? `at ${opts.runtime_url}`
      : `run by the daemon on the models in ${opts.models_dir}`
    console.error(
      `gridkeep worker ${DAEMON_VERSION}: server ${opts.server}, runtime ${opts.engine} ${runtime}`,
    )
    return await agent.run()
  } catch (e) {
    console.error(`gridkeep worker: ${(e as Error).message}`)
    return 1
  } finally {
    stopView()
    process.off('SIGTERM', onSignal)
    process.off('SIGINT', onSignal)
  }
}

if (import.meta.main) process.exit(await runWorkerCommand(process.argv.slice(2)))
