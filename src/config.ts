import { join } from 'node:path'
import { type Static, Type as T } from '@sinclair/typebox'
import { Value } from '@sinclair/typebox/value'
import { parseStorageUrl } from './lib/blobs/s3'
import { TrustedProxies } from './lib/client-address'
import { keepOutOfLogs } from './lib/logger'

// The one reader of process.env (ARCHITECTURE.md: config is parsed once, up front). Every variable of
// docs/configuration.md lives here with its default; a bad value stops the start with one
// line naming the variable. The same schema prints `gridkeep serve --help` and the table of docs/configuration.md.

const Int = (def: number | undefined, min: number, max: number, description: string) =>
  T.Integer({ minimum: min, maximum: max, description, ...(def === undefined ? {} : { default: def }) })
const Str = (description: string, def?: string) =>
  T.String({ description, ...(def === undefined ? {} : { default: def }) })
const Bool = (def: boolean, description: string) => T.Boolean({ default: def, description })

const MiB = 1024 * 1024

export const ConfigSchema = T.Object({
  PORT: Int(8080, 0, 65535, 'TCP port the server listens on (0 = any free port)'),
  HOST: Str('Interface to bind', '0.0.0.0'),
  TLS_CERT_FILE: T.Optional(
    Str(
      'PEM certificate with its chain (leaf first): with TLS_KEY_FILE the server speaks HTTPS itself and sends Strict-Transport-Security; both or neither',
    ),
  ),
  TLS_KEY_FILE: T.Optional(Str('PEM private key of TLS_CERT_FILE (unencrypted)')),
  TLS_CHECK_SECONDS: Int(
    60,
    1,
    86400,
    'How often TLS_CERT_FILE and TLS_KEY_FILE are checked for a renewed certificate, then served to new connections without a restart',
  ),
  TRUSTED_PROXIES: T.Optional(
    Str(
      "Comma-separated addresses and CIDR ranges of reverse proxies in front of the server, e.g. 127.0.0.1,10.0.0.0/8: a request from one of them is taken to come from the rightmost X-Forwarded-For address that is not one of them (audit entries, the login rate limit); unset = trust none, the connection's peer is the client",
    ),
  ),
  DATA_DIR: Str('Directory for the database, uploaded files, the JWT secret and the mail outbox', './data'),
  DATABASE_PATH: T.Optional(Str('SQLite database file (default DATA_DIR/gridkeep.db)')),
  DATABASE_URL: T.Optional(
    Str(
      'postgres://user:password@host:5432/db: use PostgreSQL 15+ instead of SQLite (several instances may share it; JWT_SECRET then required)',
    ),
  ),
  DATABASE_POOL_SIZE: Int(20, 1, 1000, 'PostgreSQL connections each instance keeps open at most'),
  SQLITE_SYNCHRONOUS: T.Union([T.Literal('normal'), T.Literal('full')], {
    default: 'normal',
    description: 'SQLite synchronous mode: normal (WAL-safe, fast) or full (survives power loss)',
  }),
  PUBLIC_URL: T.Optional(
    Str('Public base URL used in mailed links (default http://localhost:PORT, https:// with TLS_CERT_FILE)'),
  ),
  JWT_SECRET: T.Optional(
    T.String({
      minLength: 32,
      description: 'HS256 secret, at least 32 chars (default: generated once, kept in DATA_DIR/jwt-secret)',
    }),
  ),
  JWT_TTL_SECONDS: Int(86400, 60, 31 * 86400, 'Lifetime of a login JWT'),
  ADMIN_EMAIL: Str('Email of the superadmin created at first start', 'admin@localhost'),
  ADMIN_PASSWORD: T.Optional(
    T.String({
      minLength: 8,
      description: 'Password of that superadmin (default: generated and printed once to the log)',
    }),
  ),
  SIGNUP_ENABLED: Bool(true, 'false makes POST /v1/auth/signup answer 403 signup_disabled'),
  PASSWORD_LOGIN: Bool(
    true,
    'false leaves only single sign-on (OIDC_ISSUER): login, signup and password resets answer 403 password_login_disabled; the start is refused unless a superadmin can sign in by SSO',
  ),
  OIDC_ISSUER: T.Optional(
    Str(
      'OpenID Connect provider for single sign-on, e.g. https://keycloak.lab.example/realms/lab (discovered from its /.well-known/openid-configuration); unset = no SSO',
    ),
  ),
  OIDC_CLIENT_ID: T.Optional(Str("gridkeep's client id at the provider (required with OIDC_ISSUER)")),
  OIDC_CLIENT_SECRET: T.Optional(
    Str(
      "gridkeep's client secret at the provider (unset: a public client, PKCE only); never written to the log, wherever a line would quote it",
    ),
  ),
  OIDC_NAME: Str('The provider\'s name on the sign-in button: "Sign in with <OIDC_NAME>"', 'SSO'),
  OIDC_SCOPES: Str(
    'Scopes asked of the provider, space-separated (must include openid)',
    'openid email profile',
  ),
  OIDC_ALLOWED_DOMAINS: T.Optional(
    Str(
      'Comma-separated email domains whose people may sign in by SSO, e.g. lab.example,uni.example (unset = any)',
    ),
  ),
  OIDC_ADMIN_GROUPS: T.Optional(
    Str(
      'Comma-separated values of the groups claim that make a superadmin; set, every SSO sign-in with a groups claim makes the role follow it, except that the last active superadmin is never demoted (unset = SSO never changes a role)',
    ),
  ),
  OIDC_TIMEOUT_SECONDS: Int(
    10,
    1,
    300,
    'Time the identity provider has to answer one request (discovery, token, keys, userinfo)',
  ),
  SMTP_URL: T.Optional(
    Str('SMTP server for mail, e.g. smtp://user:pass@host:587 (unset: mails go to DATA_DIR/outbox/*.eml)'),
  ),
  MAIL_FROM: Str('Sender address of mails', 'gridkeep <noreply@localhost>'),
  RESET_TOKEN_TTL_SECONDS: Int(3600, 60, 7 * 86400, 'Validity of a password reset token'),
  RATE_LIMIT_LOGIN_PER_MINUTE: Int(
    10,
    0,
    1_000_000,
    'Logins per email and client address (see TRUSTED_PROXIES) per minute (0 = off)',
  ),
  RATE_LIMIT_FORGOT_PER_HOUR: Int(5, 0, 1_000_000, 'Forgot-password requests per email per hour (0 = off)'),
  RATE_LIMIT_KEYS_PER_MINUTE: Int(10, 0, 1_000_000, 'API key creations per caller per minute (0 = off)'),
  RATE_LIMIT_SSO_PER_MINUTE: Int(
    60,
    0,
    1_000_000,
    'Single sign-ins started (GET /v1/auth/oidc/start) per client address per minute (0 = off); behind a proxy every client has its address',
  ),
  MAX_UPLOAD_BYTES: Int(200 * MiB, 1, 64 * 1024 * MiB, 'Largest accepted file upload'),
  MAX_LINE_BYTES: Int(MiB, 16, 256 * MiB, 'Longest accepted line of a batch input file'),
  MAX_REQUESTS_PER_BATCH: Int(50_000, 1, 10_000_000, 'Most request lines in one batch input file'),
  MAX_SSE_STREAMS_PER_USER: Int(16, 1, 10_000, 'Concurrent batch event streams one user may hold open'),
  SSE_PING_SECONDS: Int(15, 1, 3600, 'Interval of the keep-alive comment on batch event streams'),
  SSE_FOLLOW_SECONDS: Int(
    2,
    1,
    60,
    'Longest a batch event stream in follow mode goes without re-reading its batch',
  ),
  HEARTBEAT_TIMEOUT_SECONDS: Int(120, 1, 86400, 'A worker silent this long is offline'),
  SWEEP_INTERVAL_SECONDS: Int(60, 1, 86400, 'Period of the sweeper that requeues work of silent workers'),
  MAX_BATCH_ATTEMPTS: Int(3, 1, 100, 'Attempts before a batch is terminally failed'),
  SHARD_MIN_REQUESTS: Int(
    100,
    1,
    1_000_000,
    'Smallest shard of a split batch; a batch of at most twice this many requests is never split',
  ),
  // 250: a crashed or stalled worker costs at most this many requests, rerun by one backup copy
  // (docs/api.md §16): with 1,000 the straggler case took 1.75× as long as no crash, with 250
  // 1.25× (bench/fleet.ts e), for 2 % more time without a crash.
  SHARD_MAX_REQUESTS: Int(
    250,
    0,
    1_000_000,
    'Largest shard of a split batch (0 turns sharding off: every batch runs whole on one worker)',
  ),
  PREFIX_ORDER: Bool(
    true,
    'Run each batch in execution order by shared prompt prefix, decided at validation, with shards cut from that order (docs/api.md §6); false: file order',
  ),
  SHARD_BACKUPS: Bool(
    true,
    'Backup copies of straggling shards on workers with nothing else to do (docs/api.md §16); false: a dead holder’s shard waits for the sweeper',
  ),
  PLACEMENT: T.Union([T.Literal('queue'), T.Literal('loaded_first')], {
    default: 'queue',
    description:
      'Which model a polling worker takes work of: queue (workers that load models spread over the waiting work when a load pays; overdue models first) or loaded_first (the rules before placement: loaded models first)',
  }),
  PLACEMENT_MAX_WAIT_SECONDS: Int(
    300,
    1,
    7 * 86400,
    'A model whose longest-waiting batch waited this long goes first, even for a worker that must load it',
  ),
  PLACEMENT_DEFAULT_LOAD_SECONDS: Int(
    30,
    0,
    86400,
    'Load time assumed while no worker has measured any model (workers report it in model_stats; a model none has measured is assumed to load as the measured ones do, on average)',
  ),
  PLACEMENT_DEFAULT_REQUESTS_PER_SECOND: Int(
    1,
    1,
    1_000_000,
    'Requests per second assumed of a worker while no worker has measured any model (a model none has measured is assumed to run as the measured ones do, on average)',
  ),
  POOL_CACHE_SECONDS: Int(15, 0, 3600, 'Cache lifetime of GET /v1/pool/capacity'),
  MIN_WORKERS_FOR_HARDWARE: Int(
    3,
    0,
    1_000_000,
    'Online workers needed before pool hardware figures are shown',
  ),
  FILE_RETENTION_DAYS: Int(
    30,
    0,
    36500,
    'Days the output and error files of a finished batch are kept, then deleted (0 = kept until deleted)',
  ),
  AUDIT_RETENTION_DAYS: Int(
    365,
    0,
    36500,
    'Days audit log entries are kept, then deleted by the retention pass (0 = kept forever)',
  ),
  USER_STORAGE_QUOTA_BYTES: T.Optional(
    Int(
      undefined,
      1,
      Number.MAX_SAFE_INTEGER,
      'Bytes of files one user may keep (every file they own: uploads, outputs, errors); unset = unlimited',
    ),
  ),
  MIN_FREE_DISK_BYTES: Int(
    1024 * MiB,
    0,
    Number.MAX_SAFE_INTEGER,
    'Below this much free space on the files disk, uploads and result uploads answer 507 (local storage only; 0 = off)',
  ),
  STORAGE_URL: T.Optional(
    Str('Where file bytes live: unset = DATA_DIR/files; s3://BUCKET[/PREFIX] = S3-compatible storage'),
  ),
  S3_ENDPOINT: T.Optional(Str('S3 endpoint URL, e.g. https://s3.eu-west-1.amazonaws.com or a MinIO address')),
  S3_REGION: T.Optional(Str('S3 region, e.g. eu-west-1 (some S3-compatible servers ignore it)')),
  S3_ACCESS_KEY_ID: T.Optional(Str('S3 access key id')),
  S3_SECRET_ACCESS_KEY: T.Optional(Str('S3 secret access key')),
  WEBHOOK_ALLOW_PRIVATE: Bool(
    false,
    'true lets webhooks reach loopback, link-local, private and cloud-metadata addresses (a LAN receiver)',
  ),
  WEBHOOK_TIMEOUT_SECONDS: Int(10, 1, 300, 'Time a webhook receiver has to answer one delivery'),
  WEBHOOK_CONCURRENCY: Int(8, 1, 1000, 'Webhook deliveries in flight at once, per instance'),
  CATALOGUE_PATH: T.Optional(
    Str('Model catalogue manifest (default catalogue/models.yaml, else the copy built into the binary)'),
  ),
  SHUTDOWN_TIMEOUT_SECONDS: Int(
    30,
    1,
    3600,
    'On SIGTERM, how long in-flight requests may take to finish before connections are cut',
  ),
  METRICS_TOKEN: T.Optional(
    T.String({ minLength: 1, description: 'When set, /metrics requires Bearer <token>' }),
  ),
  LOG_LEVEL: T.Union([T.Literal('debug'), T.Literal('info'), T.Literal('warn'), T.Literal('error')], {
    default: 'info',
    description: 'Least severe log level written',
  }),
})

type Raw = Static<typeof ConfigSchema>
export type Config = Raw & { DATABASE_PATH: string; PUBLIC_URL: string; CATALOGUE_PATH?: string }

export class ConfigError extends Error {}

/** Parses the environment once. Throws ConfigError with one line naming the variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const input: Record<string, unknown> = {}
  for (const name of Object.keys(ConfigSchema.properties)) {
    const value = env[name]
    if (value !== undefined && value !== '') input[name] = value.trim()
  }
  const converted = Value.Default(ConfigSchema, Value.Convert(ConfigSchema, input)) as Record<string, unknown>
  const first = Value.Errors(ConfigSchema, converted).First()
  if (first) {
    const name = first.path.replace(/^\//, '') || 'environment'
    const got = input[name] === undefined ? '' : ` (got ${JSON.stringify(redact(name, input[name]))})`
    throw new ConfigError(`invalid configuration: ${name}: ${describe(first.schema)}${got}`)
  }
  const raw = converted as Raw
  if (raw.DATABASE_URL !== undefined) {
    if (!isPostgresUrl(raw.DATABASE_URL)) {
      throw new ConfigError(
        'invalid configuration: DATABASE_URL: expected a postgres:// or postgresql:// URL with a host (got "***")',
      )
    }
    // docs/api.md §12: every instance must sign and check the same tokens.
    if (raw.JWT_SECRET === undefined) {
      throw new ConfigError(
        'invalid configuration: JWT_SECRET: required with DATABASE_URL (every instance must share it)',
      )
    }
  }
  // docs/api.md §16: every shard lies between the bounds, so they must not cross.
  if (raw.SHARD_MAX_REQUESTS > 0 && raw.SHARD_MIN_REQUESTS > raw.SHARD_MAX_REQUESTS) {
    throw new ConfigError(
      `invalid configuration: SHARD_MIN_REQUESTS: expected at most SHARD_MAX_REQUESTS (${raw.SHARD_MAX_REQUESTS}), or SHARD_MAX_REQUESTS=0 to turn sharding off`,
    )
  }
  if (raw.SMTP_URL !== undefined && !isSmtpUrl(raw.SMTP_URL)) {
    // Caught here, not by the mailer at start, which would crash with an unclear error.
    throw new ConfigError(
      'invalid configuration: SMTP_URL: expected an smtp:// or smtps:// URL with a host (got "***")',
    )
  }
  // docs/deployment.md "TLS on the binary": a certificate without its key (or the reverse) would
  // start a server that speaks plain HTTP while its admin believes otherwise.
  if ((raw.TLS_CERT_FILE === undefined) !== (raw.TLS_KEY_FILE === undefined)) {
    const [set, missing] = raw.TLS_CERT_FILE
      ? ['TLS_CERT_FILE', 'TLS_KEY_FILE']
      : ['TLS_KEY_FILE', 'TLS_CERT_FILE']
    throw new ConfigError(`invalid configuration: ${missing}: required with ${set} (both or neither)`)
  }
  if (raw.STORAGE_URL !== undefined && !parseStorageUrl(raw.STORAGE_URL)) {
    throw new ConfigError(
      'invalid configuration: STORAGE_URL: expected s3://BUCKET or s3://BUCKET/PREFIX (a lowercase bucket name)',
    )
  }
  try {
    TrustedProxies.parse(raw.TRUSTED_PROXIES)
  } catch (error) {
    throw new ConfigError(`invalid configuration: TRUSTED_PROXIES: ${(error as Error).message}`)
  }
  checkSignIn(raw)
  // docs/configuration.md OIDC_CLIENT_SECRET: never in the log, whatever line would quote it.
  keepOutOfLogs(raw.OIDC_CLIENT_SECRET)
  return {
    ...raw,
    DATA_DIR: raw.DATA_DIR,
    DATABASE_PATH: raw.DATABASE_PATH ?? join(raw.DATA_DIR, 'gridkeep.db'),
    PUBLIC_URL: (raw.PUBLIC_URL ?? `${raw.TLS_CERT_FILE ? 'https' : 'http'}://localhost:${raw.PORT}`).replace(
      /\/+$/,
      '',
    ),
  }
}

/** A comma-separated setting as its trimmed, non-empty items (OIDC_ALLOWED_DOMAINS, OIDC_ADMIN_GROUPS). */
export const listSetting = (value: string | undefined): string[] =>
  (value ?? '')
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean)

const DOMAIN =
  /^(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$/

// docs/api.md §2 "Single sign-on": settings that break each other stop the start with one line.
function checkSignIn(raw: Raw) {
  const fail = (line: string) => {
    throw new ConfigError(`invalid configuration: ${line}`)
  }
  if (raw.OIDC_ISSUER === undefined) {
    for (const name of [
      'OIDC_CLIENT_ID',
      'OIDC_CLIENT_SECRET',
      'OIDC_ALLOWED_DOMAINS',
      'OIDC_ADMIN_GROUPS',
    ] as const)
      if (raw[name] !== undefined) fail(`${name}: needs OIDC_ISSUER (single sign-on is off without it)`)
    if (!raw.PASSWORD_LOGIN) fail('PASSWORD_LOGIN: false needs OIDC_ISSUER (nobody could sign in at all)')
    return
  }
  let issuer: URL | undefined
  try {
    issuer = new URL(raw.OIDC_ISSUER)
  } catch {}
  if (
    !issuer ||
    (issuer.protocol !== 'https:' && issuer.protocol !== 'http:') ||
    issuer.search ||
    issuer.hash
  )
    fail("OIDC_ISSUER: expected the provider's issuer, an http:// or https:// URL without query or fragment")
  if (raw.OIDC_CLIENT_ID === undefined) fail('OIDC_CLIENT_ID: required with OIDC_ISSUER')
  if (!raw.OIDC_SCOPES.split(/\s+/).includes('openid'))
    fail(`OIDC_SCOPES: must include openid (got ${JSON.stringify(raw.OIDC_SCOPES)})`)
  for (const domain of listSetting(raw.OIDC_ALLOWED_DOMAINS))
    if (!DOMAIN.test(domain.toLowerCase()))
      fail(`OIDC_ALLOWED_DOMAINS: expected domains separated by commas (got ${JSON.stringify(domain)})`)
  if (raw.OIDC_ALLOWED_DOMAINS !== undefined && listSetting(raw.OIDC_ALLOWED_DOMAINS).length === 0)
    fail('OIDC_ALLOWED_DOMAINS: expected at least one domain')
  if (raw.OIDC_ADMIN_GROUPS !== undefined && listSetting(raw.OIDC_ADMIN_GROUPS).length === 0)
    fail('OIDC_ADMIN_GROUPS: expected at least one group')
}

/**
 * Settings that work but likely not as meant: logged once at the start (src/index.ts), never
 * refused, since the operator may know better (Authentik and GitLab send groups without a scope).
 */
export function configWarnings(config: Config): string[] {
  const warnings: string[] = []
  if (listSetting(config.OIDC_ADMIN_GROUPS).length > 0 && !config.OIDC_SCOPES.split(/\s+/).includes('groups'))
    warnings.push(
      `OIDC_ADMIN_GROUPS is set but OIDC_SCOPES (${JSON.stringify(config.OIDC_SCOPES)}) does not ask for groups: unless the provider sends the groups claim anyway, no sign-in carries groups and OIDC_ADMIN_GROUPS changes no role`,
    )
  return warnings
}

function isPostgresUrl(value: string): boolean {
  try {
    const url = new URL(value)
    return (url.protocol === 'postgres:' || url.protocol === 'postgresql:') && url.hostname !== ''
  } catch {
    return false
  }
}

function isSmtpUrl(value: string): boolean {
  try {
    const url = new URL(value)
    return (url.protocol === 'smtp:' || url.protocol === 'smtps:') && url.hostname !== ''
  } catch {
    return false
  }
}

// Never echo a secret back in the startup error.
const redact = (name: string, v: unknown) =>
  /SECRET|PASSWORD|TOKEN|SMTP_URL|DATABASE_URL|STORAGE_URL|ACCESS_KEY/.test(name) ? '***' : v

function describe(schema: any): string {
  if (schema.anyOf) return `expected one of ${schema.anyOf.map((s: any) => s.const).join(', ')}`
  if (schema.type === 'integer') return `expected an integer from ${schema.minimum} to ${schema.maximum}`
  if (schema.type === 'boolean') return 'expected true or false'
  if (schema.minLength) return `expected at least ${schema.minLength} characters`
  return `expected ${schema.type}`
}

/** The rows of the configuration table (docs/configuration.md, `gridkeep serve --help`). */
export function configRows(): { name: string; default: string; description: string }[] {
  return Object.entries(ConfigSchema.properties).map(([name, s]: [string, any]) => ({
    name,
    default: s.default === undefined ? '' : String(s.default),
    description: s.description ?? '',
  }))
}
