import { collectDefaultMetrics } from 'prom-client'
import { createApp } from './app'
import { createServer, type Server } from './compose'
import { type Config, ConfigError, configWarnings, loadConfig } from './config'
import { BlobStoreUnavailableError } from './lib/blobs'
import { log, setLogLevel } from './lib/logger'
import { readTlsPair, TlsFilesError, type TlsPair, watchTlsFiles } from './lib/tls-files'
import { ensureSuperadmin } from './modules/auth/service'
import { checkSuperadminCanSignIn } from './modules/auth/sso'
import { seedCatalogue } from './modules/catalogue/seed'
import { acquireInstanceLock, InstanceLockedError } from './ops/instance-lock'
import * as retention from './services/retention'
import * as signals from './services/signals'
import * as sweeper from './services/sweeper'
import * as validator from './services/validator'
import * as webhooks from './services/webhooks'

// Composition root: lock → loadConfig → openDb → migrate → seed → services → listen, and the one
// shutdown sequence (docs/deployment.md "The single binary"): stop accepting, drain in-flight requests, end event streams, stop
// the background loops, close the database, release the lock.

export interface RunningServer {
  deps: Server
  port: number
  url: string
  /** Graceful stop; idempotent (every call returns the same promise). */
  stop(): Promise<StopOutcome>
  /**
   * Settles with why, if the server can no longer serve on its own (it could not listen again after
   * a certificate renewal: RELISTEN_DELAYS_MS); the owner stops it. Never settles otherwise.
   */
  failed: Promise<string>
}

/**
 * docs/deployment.md "TLS on the binary": the waits before each new attempt to listen when the port
 * was taken in the instant a certificate renewal replaced the listener. Doubling, so a port held
 * for a while is not hammered; about two minutes in all, then the server gives up and stops (a
 * supervisor such as systemd's Restart=on-failure starts it again).
 */
export const RELISTEN_DELAYS_MS: readonly number[] = [
  250, 500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000,
]

export interface StopOutcome {
  /** false when SHUTDOWN_TIMEOUT_SECONDS ran out and open connections were cut. */
  drained: boolean
}

/**
 * A background loop's stop(), as returned by `start(deps)` of src/services/*. It may return a
 * promise that settles once a pass in progress has finished: the database is closed only after.
 */
type StopLoop = () => unknown

export interface StartOptions {
  /** The waits between attempts to listen again after a renewal (tests shorten them). */
  relistenDelaysMs?: readonly number[]
}

export async function startServer(
  config: Config,
  given?: Server,
  opts: StartOptions = {},
): Promise<RunningServer> {
  const relistenDelaysMs = opts.relistenDelaysMs ?? RELISTEN_DELAYS_MS
  setLogLevel(config.LOG_LEVEL)
  for (const warning of configWarnings(config)) log.warn(warning)
  // Before the database is opened or migrated: a second server must not touch it at all.
  // PostgreSQL is shared by design (docs/api.md §12): several instances, no lock.
  const lock = config.DATABASE_URL ? { release() {} } : acquireInstanceLock(config.DATABASE_PATH)
  let deps: Server | undefined = given
  const loops: StopLoop[] = []
  let server: ReturnType<typeof Bun.serve>
  /** Listeners a certificate renewal replaced, finishing the requests they were answering. */
  const retired: { server: ReturnType<typeof Bun.serve>; drained: Promise<void> }[] = []
  /** The next attempt to listen after a renewal found the port taken; cleared by the shutdown. */
  let relisten: ReturnType<typeof setTimeout> | undefined
  /** Set when the shutdown begins: nothing listens again after it. */
  let closing = false
  let fail!: (why: string) => void
  const failed = new Promise<string>((resolve) => {
    fail = resolve
  })
  try {
    // docs/deployment.md "TLS on the binary": an unreadable or mismatched pair stops the start.
    const tls = config.TLS_CERT_FILE ? tlsPairOrConfigError(config) : null
    deps ??= createServer(config)
    await readyStore(config, deps)
    // docs/api.md §12: an unusable STORAGE_URL stops the start; what a crash left half-written goes.
    const leftovers = await deps.blobs.prepare()
    if (leftovers > 0) log.info('removed leftovers of interrupted uploads', { count: leftovers })
    // First start hashes the superadmin's password off the main thread while the app is built.
    const superadmin = ensureSuperadmin(deps)
    // docs/api.md §4 catalogue rule 7: the catalogue is upserted from the manifest at every start, before listening.
    const catalogue = seedCatalogue(deps)
    collectDefaultMetrics({ register: deps.metrics.registry })
    const app = createApp(deps)
    await Promise.all([superadmin, catalogue])
    await checkSuperadminCanSignIn(deps)
    // Background loops register their stop() in `loops`; the shutdown awaits them all.
    // The validator validates against the catalogue: it starts once the catalogue is seeded.
    loops.push(validator.start(deps))
    loops.push(signals.start(deps))
    // Elysia's listen() hands its compiled routes to Bun's native router (a plain fetch handler
    // measured about 2× slower on the heartbeat) and gives handlers the server, e.g. for client IPs.
    const listen = (port: number, pair: TlsPair | null, again = false) => {
      const hooks = new Set(process.listeners('beforeExit'))
      app.listen({
        port,
        hostname: config.HOST,
        // Uploads are streamed and capped by the files module itself (413 in the envelope); Bun's own
        // limit is only a backstop. It counts bytes as the socket receives them, ahead of what the
        // handler has parsed, so it sits well above the cap: 1 MiB above lost that race under load.
        maxRequestBodySize: config.MAX_UPLOAD_BYTES + 64 * 1024 * 1024,
        idleTimeout: 0,
        // Elysia defaults to SO_REUSEPORT, with which a second server (another DATA_DIR) would share
        // the port silently and get half the traffic: a busy port must stop the start instead.
        reusePort: false,
        // Elysia's default follows NODE_ENV; never serve Bun's development error pages.
        development: false,
        ...(pair ? { tls: { cert: pair.cert, key: pair.key } } : {}),
      })
      // Elysia adds a beforeExit hook (stop app.server) at each listen(): one is all the app needs.
      if (again)
        for (const hook of process.listeners('beforeExit'))
          if (!hooks.has(hook)) process.off('beforeExit', hook)
      return app.server!
    }
    server = listen(config.PORT, tls)
    const boundPort = server.port!
    if (tls) {
      log.info('serving HTTPS', { subject: tls.subject, not_after: tls.notAfter })
      const watch = watchTlsFiles({
        certFile: config.TLS_CERT_FILE!,
        keyFile: config.TLS_KEY_FILE!,
        everyMs: config.TLS_CHECK_SECONDS * 1000,
        // Bun cannot change a listening server's certificate (reload() ignores tls): the listener is
        // replaced on the same port, at once, while the one it replaces finishes what it answers.
        // A connection arriving in the instant between the two is refused (clients try again:
        // docs/deployment.md "TLS on the binary").
        renewed: (pair) => {
          if (closing) return
          // A renewal while an earlier one still waits to listen: this pair is the one to serve.
          clearTimeout(relisten)
          relisten = undefined
          const old = server
          // The port first bound (config.PORT may be 0): a stopped listener no longer says it.
          const port = boundPort
          const entry = { server: old, drained: old.stop(false) }
          retired.push(entry)
          void entry.drained.then(() => {
            const at = retired.indexOf(entry)
            if (at >= 0) retired.splice(at, 1)
          })
          const again = (attempt: number) => {
            relisten = undefined
            if (closing) return
            try {
              server = listen(port, pair, true)
            } catch (error) {
              // The port was taken in that instant. Until it is free the server listens nowhere:
              // each attempt says so, at growing intervals, and the last one gives up.
              const wait = relistenDelaysMs[attempt]
              const fields = { port, attempt: attempt + 1, attempts: relistenDelaysMs.length + 1, error }
              if (wait === undefined) {
                log.error(
                  'not listening: cannot listen again after the certificate renewal; giving up, stopping',
                  fields,
                )
                fail(`cannot listen on port ${port} again after the certificate renewal`)
                return
              }
              log.error('not listening: cannot listen again after the certificate renewal; retrying', {
                ...fields,
                retry_in_ms: wait,
              })
              relisten = setTimeout(() => again(attempt + 1), wait)
              return
            }
            log.info('TLS certificate renewed: serving it to new connections', {
              subject: pair.subject,
              not_after: pair.notAfter,
            })
          }
          again(0)
        },
        refused: (why) =>
          log.warn('TLS files changed but cannot be served yet; still serving the previous certificate', {
            why,
          }),
      })
      loops.push(() => watch.stop())
    }
    loops.push(sweeper.start(deps))
    loops.push(retention.start(deps))
    loops.push(webhooks.start(deps))
  } catch (error) {
    for (const stopLoop of loops) stopLoop()
    if (!given) await deps?.store.close().catch(() => {})
    lock.release()
    throw error
  }
  const scheme = config.TLS_CERT_FILE ? 'https' : 'http'
  const url = `${scheme}://${config.HOST === '0.0.0.0' ? 'localhost' : config.HOST}:${server.port}`
  // The URL may carry a password: only its engine is logged.
  const database = config.DATABASE_URL ? 'postgresql' : config.DATABASE_PATH
  log.info('gridkeep listening', { url, database, pid: process.pid })

  const running = deps
  let stopping: Promise<StopOutcome> | undefined
  const shutdown = async (): Promise<StopOutcome> => {
    const started = performance.now()
    // A renewal waiting to listen again never does: the server is going away.
    closing = true
    clearTimeout(relisten)
    relisten = undefined
    log.info('shutting down: draining requests', { timeout_seconds: config.SHUTDOWN_TIMEOUT_SECONDS })
    // Event streams watch this signal and end, so their connections can drain like any other.
    running.shutdown.abort()
    // server.stop() refuses new connections, closes idle keep-alive ones at once and resolves
    // when the last in-flight response is complete.
    const drained = await settlesWithin(
      Promise.all([
        server.stop(false),
        ...retired.map((r) => r.drained),
        ...loops.map(async (stopLoop) => stopLoop()),
      ]),
      config.SHUTDOWN_TIMEOUT_SECONDS * 1000,
    )
    if (!drained) {
      log.warn('shutdown timeout: cutting the remaining connections')
      await settlesWithin(
        Promise.all([server, ...retired.map((r) => r.server)].map((s) => s.stop(true))),
        2000,
      )
    }
    // Connections are closed; let requests still being answered finish, so that they are logged.
    for (let waited = 0; running.requestsOpen > 0 && waited < 1000; waited += 5) await Bun.sleep(5)
    running.mailer.close()
    await running.store.close()
    lock.release()
    log.info('stopped', { drained, duration_ms: Math.round(performance.now() - started) })
    return { drained }
  }
  return {
    deps: running,
    port: server.port!,
    url,
    stop: () => {
      stopping ??= shutdown()
      return stopping
    },
    failed,
  }
}

/**
 * Connects and migrates. A PostgreSQL that is unreachable, refuses the credentials or the DDL
 * stops the start with one line naming DATABASE_URL, its password never echoed (docs/api.md §12).
 */
async function readyStore(config: Config, deps: Server) {
  try {
    await deps.store.ready()
  } catch (error) {
    if (!config.DATABASE_URL) throw error
    const password = new URL(config.DATABASE_URL).password
    // drizzle wraps the driver's error ("Failed query: …"): the cause says why.
    const cause = error instanceof Error && error.cause instanceof Error ? error.cause.message : null
    let reason = [error instanceof Error ? error.message.split('\n')[0] : String(error), cause]
      .filter(Boolean)
      .join(': ')
    if (password) reason = reason.replaceAll(password, '***').replaceAll(decodeURIComponent(password), '***')
    throw new ConfigError(`DATABASE_URL: cannot use the database: ${reason.split('\n')[0]}`)
  }
}

function tlsPairOrConfigError(config: Config): TlsPair {
  try {
    return readTlsPair(config.TLS_CERT_FILE!, config.TLS_KEY_FILE!)
  } catch (error) {
    if (error instanceof TlsFilesError) throw new ConfigError(error.message)
    throw error
  }
}

/** true if `p` settled within `ms`; a rejection counts as settled (the shutdown goes on). */
async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms)
  })
  try {
    return await Promise.race([
      p.then(
        () => true,
        (error) => {
          log.error('error while shutting down', { error })
          return true
        },
      ),
      timeout,
    ])
  } finally {
    clearTimeout(timer)
  }
}

/**
 * `gridkeep serve` and `bun run start`: start from the environment and stop on SIGTERM/SIGINT.
 * A bad configuration, a database held by another server or a busy port ends the process with
 * one line on stderr.
 */
export async function serve(env: Record<string, string | undefined> = process.env): Promise<RunningServer> {
  let running: RunningServer | undefined
  let pending: { reason: string; code: number } | undefined
  const stopAndExit = (reason: string, code: number) => {
    // A signal during startup is honoured once the server is up (a half-started server is not stopped).
    if (!running) {
      pending ??= { reason, code }
      return
    }
    log.info('stop requested', { reason })
    void running.stop().then(({ drained }) => process.exit(drained ? code : 1))
  }
  // Installed before the start, so no signal can slip in between "listening" and the handlers.
  // A second signal while draining changes nothing: stop() is idempotent and bounded by its timeout.
  process.on('SIGTERM', () => stopAndExit('SIGTERM', 0))
  process.on('SIGINT', () => stopAndExit('SIGINT', 0))
  process.on('unhandledRejection', (error) => log.error('unhandled rejection', { error }))
  process.on('uncaughtException', (error) => {
    log.error('uncaught exception', {
      error: { name: error.name, message: error.message, stack: error.stack },
    })
    stopAndExit('uncaught exception', 1)
  })
  try {
    running = await startServer(loadConfig(env))
  } catch (error) {
    if (
      error instanceof ConfigError ||
      error instanceof InstanceLockedError ||
      error instanceof BlobStoreUnavailableError
    ) {
      console.error(`gridkeep: ${error.message}`)
      process.exit(error instanceof InstanceLockedError ? 1 : 2)
    }
    if ((error as { code?: string }).code === 'EADDRINUSE') {
      console.error(`gridkeep: cannot listen: ${(error as Error).message}`)
      process.exit(1)
    }
    throw error
  }
  if (pending) stopAndExit(pending.reason, pending.code)
  void running.failed.then((why) => stopAndExit(why, 1))
  return running
}

if (import.meta.main) await serve()
