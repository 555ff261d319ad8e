import { createApp } from './app'
import { type Config, ConfigError, loadConfig } from './config'
import { createDeps, type Deps } from './deps'
import { log, setLogLevel } from './lib/logger'
import { ensureSuperadmin } from './modules/auth/service'
import { seedCatalogue } from './modules/catalogue/seed'
import * as sweeper from './services/sweeper'
import * as validator from './services/validator'

// Composition root: loadConfig → openDb → migrate → seed → services → listen.

export interface RunningServer {
  deps: Deps
  port: number
  url: string
  stop(): Promise<void>
}

export async function startServer(config: Config, deps: Deps = createDeps(config)): Promise<RunningServer> {
  setLogLevel(config.LOG_LEVEL)
  await ensureSuperadmin(deps)
  // SPEC rule 7: the catalogue is upserted from the manifest at every start, before listening.
  await seedCatalogue(deps)
  const stopValidator = validator.start(deps)
  const app = createApp(deps)
  // Elysia's listen() hands its compiled routes to Bun's native router (a plain fetch handler
  // measured about 2× slower on the heartbeat) and gives handlers the server, e.g. for client IPs.
  app.listen({
    port: config.PORT,
    hostname: config.HOST,
    // Uploads are streamed and capped by the files module itself (413 in the envelope); Bun's own
    // limit is only a backstop. It counts bytes as the socket receives them, ahead of what the
    // handler has parsed, so it sits well above the cap: 1 MiB above lost that race under load.
    maxRequestBodySize: config.MAX_UPLOAD_BYTES + 64 * 1024 * 1024,
    idleTimeout: 0,
  })
  const server = app.server!
  const stopSweeper = sweeper.start(deps)
  const url = `http://${config.HOST === '0.0.0.0' ? 'localhost' : config.HOST}:${server.port}`
  log.info('gridkeep listening', { url, database: config.DATABASE_PATH })
  return {
    deps,
    port: server.port!,
    url,
    async stop() {
      deps.shutdown.abort()
      await stopValidator()
      stopSweeper()
      await server.stop()
      deps.mailer.close()
      deps.sqlite.close()
    },
  }
}

export async function serve(env: Record<string, string | undefined> = process.env): Promise<RunningServer> {
  let config: Config
  try {
    config = loadConfig(env)
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(`gridkeep: ${e.message}`)
      process.exit(2)
    }
    throw e
  }
  const running = await startServer(config)
  const shutdown = async (signal: string) => {
    log.info('shutting down', { signal })
    await running.stop()
    process.exit(0)
  }
  process.once('SIGTERM', () => void shutdown('SIGTERM'))
  process.once('SIGINT', () => void shutdown('SIGINT'))
  return running
}

if (import.meta.main) await serve()
