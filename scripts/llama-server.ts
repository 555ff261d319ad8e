// A real inference engine for tests and benchmarks: llama.cpp's llama-server from Debian sid, run
// beside this machine's own (older) system, serving a tiny generated model.
//
//   bun scripts/llama-server.ts fetch            fetch and unpack the engine (cached), print its root
//                                                and the router command
//   bun scripts/llama-server.ts model [PATH] [SEED]  write the tiny model, print its path and sha256
//   bun scripts/llama-server.ts start            start llama-server on a free loopback port, print
//                                                its URL and PID (stop it with `kill PID`)
//
// - Fetch: the .debs of llama.cpp-tools and the libraries it needs (sid's libc among them) are
//   downloaded with `apt-get download` through a private apt configuration that names the sid suite
//   on the mirror this machine's own apt sources use (read at run time), then unpacked with
//   `dpkg-deb -x` into the cache directory. Nothing is installed into the system.
// - Run: the binary is started through the unpacked root's own loader
//   (`…/ld-linux-x86-64.so.2 --library-path …`), so sid's libc serves it whatever the host has, and
//   GGML_BACKEND_PATH names the portable CPU backend (without it no backend loads).
// - Router: llama-server's router mode (`--models-dir`, one child process per loaded model) starts
//   each child by re-executing its own binary, which through the loader would be the loader. So the
//   fetch also makes `llama-server.router`, a copy whose ELF interpreter is the root's loader (set
//   with sid's patchelf, itself run through that loader), and `llama-router`, a shell script that
//   sets LD_LIBRARY_PATH and GGML_BACKEND_PATH for that one process (the children inherit them;
//   an RPATH would not do: libllama-server-impl.so has its own RUNPATH) and execs the copy. The
//   script is what `gridkeep worker --llama-server` takes (docs/worker.md).
// - Model: a llama-architecture GGUF v3 (2 layers, width 64, F32 weights from a seeded generator,
//   ~0.5 MB), the same bytes on every run for one seed; another seed gives other weights (another
//   sha256), so tests can hold several models. Another shape makes a larger one (PREFILL: 4 layers
//   of width 128, for a benchmark where prefill must dominate). Its vocabulary holds the 256 byte tokens <0x00>…<0xFF>
//   (llama-server aborts on a character it cannot tokenize otherwise).
//
// Cache: GRIDKEEP_LLAMA_CACHE, else $XDG_CACHE_HOME/gridkeep-llama, else ~/.cache/gridkeep-llama;
// outside the repository, reused between runs. A fetch that fails (no network, a package renamed or
// gone) returns the reason instead of throwing, so tests can report themselves as not run.

import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { spawn, spawnSync } from 'bun'

/** The packages unpacked into the engine's root: the tools, their libraries, and sid's runtime. */
export const PACKAGES = [
  'llama.cpp-tools',
  'libllama0',
  'libggml0',
  'libc6',
  'libstdc++6',
  'libgcc-s1',
  'libgomp1',
  'libssl3t64',
  'zlib1g',
  'libzstd1',
  'patchelf',
]
const LIB = 'usr/lib/x86_64-linux-gnu'

export function cacheDir(env: Record<string, string | undefined> = process.env): string {
  if (env.GRIDKEEP_LLAMA_CACHE) return env.GRIDKEEP_LLAMA_CACHE
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'gridkeep-llama')
}

export interface Engine {
  /** The unpacked root (…/root/usr/bin/llama-server). */
  root: string
  loader: string
  libraryPath: string
  binary: string
  backend: string
  /** The copy of the binary whose interpreter is `loader`: runnable directly (router mode). */
  routerBinary: string
  /** What `routerBinary` needs in its environment (and nothing else's). */
  routerEnv: Record<string, string>
  /** The script that runs `routerBinary` with `routerEnv`: a drop-in `llama-server`. */
  router: string
}

export type FetchResult = { ok: true; engine: Engine } | { ok: false; reason: string }

function engineAt(root: string): Engine {
  const lib = join(root, LIB)
  const libraryPath = [lib, join(lib, 'llama')].join(':')
  const backend = join(lib, 'ggml/backends0/libggml-cpu-x64.so')
  return {
    root,
    loader: join(lib, 'ld-linux-x86-64.so.2'),
    libraryPath,
    binary: join(root, 'usr/bin/llama-server'),
    backend,
    routerBinary: join(root, 'usr/bin/llama-server.router'),
    routerEnv: { LD_LIBRARY_PATH: libraryPath, GGML_BACKEND_PATH: backend },
    router: join(root, 'usr/bin/llama-router'),
  }
}

/** The unpacked packages are all there. */
const unpacked = (e: Engine) => [e.loader, e.binary, e.backend].every((p) => existsSync(p))
/** …and the router's copy and script were made. */
const complete = (e: Engine) => unpacked(e) && existsSync(e.routerBinary) && existsSync(e.router)

/**
 * The Debian mirror of this machine's own apt sources: the first `deb` URI of the main archive
 * (its path ends in /debian; security and third-party repositories are not it). Both the one-line
 * format (*.list) and deb822 (*.sources) are read.
 */
export function debianMirror(etcApt = '/etc/apt'): string | null {
  const files = [join(etcApt, 'sources.list')]
  const parts = join(etcApt, 'sources.list.d')
  if (existsSync(parts))
    for (const f of readdirSync(parts).sort())
      if (f.endsWith('.list') || f.endsWith('.sources')) files.push(join(parts, f))
  for (const file of files) {
    if (!existsSync(file)) continue
    const text = readFileSync(file, 'utf8')
    const uris = file.endsWith('.sources')
      ? deb822Uris(text)
      : text
          .split('\n')
          .map((l) => l.trim().match(/^deb\s+(?:\[[^\]]*\]\s+)?(\S+)/)?.[1])
          .filter((u): u is string => !!u)
    const main = uris.find((u) => /^https?:\/\/.+\/debian\/?$/.test(u))
    if (main) return main.replace(/\/+$/, '')
  }
  return null
}

function deb822Uris(text: string): string[] {
  const out: string[] = []
  for (const stanza of text.split(/\n\s*\n/)) {
    const fields = new Map<string, string>()
    for (const line of stanza.split('\n')) {
      const m = line.match(/^([A-Za-z-]+):\s*(.*)$/)
      if (m) fields.set(m[1]!.toLowerCase(), m[2]!.trim())
    }
    if (fields.get('enabled') === 'no') continue
    if (!(fields.get('types') ?? '').split(/\s+/).includes('deb')) continue
    out.push(...(fields.get('uris') ?? '').split(/\s+/).filter(Boolean))
  }
  return out
}

function run(cmd: string[], cwd?: string): { ok: boolean; output: string } {
  const r = spawnSync(cmd, { cwd, stdout: 'pipe', stderr: 'pipe' })
  return { ok: r.exitCode === 0, output: `${r.stdout.toString()}${r.stderr.toString()}`.trim() }
}

/** The engine if a previous fetch left it complete in `dir`; nothing is fetched. */
export function cachedEngine(dir = cacheDir()): Engine | null {
  const engine = engineAt(join(dir, 'root'))
  return complete(engine) ? engine : null
}

/** The engine, fetched and unpacked into `dir` unless a previous run already did. */
export function fetchEngine(dir = cacheDir(), etcApt = '/etc/apt'): FetchResult {
  try {
    return fetchInto(dir, etcApt)
  } catch (e) {
    return { ok: false, reason: `could not fetch into ${dir}: ${(e as Error).message}` }
  }
}

function fetchInto(dir: string, etcApt: string): FetchResult {
  const engine = engineAt(join(dir, 'root'))
  if (complete(engine)) return { ok: true, engine }
  if (process.arch !== 'x64' || process.platform !== 'linux')
    return {
      ok: false,
      reason: `the sid packages are fetched for linux x64, not ${process.platform} ${process.arch}`,
    }
  for (const tool of ['apt-get', 'dpkg-deb'])
    if (!Bun.which(tool)) return { ok: false, reason: `${tool} is not installed` }
  const mirror = debianMirror(etcApt)
  if (!mirror) return { ok: false, reason: `no Debian mirror found in ${etcApt}/sources.list(.d)` }

  mkdirSync(dir, { recursive: true })
  // Private apt state: the system's lists, cache and sources are neither read nor changed.
  const work = mkdtempSync(join(dir, 'fetch-'))
  try {
    if (!unpacked(engine)) {
      const debs = aptDownload(work, mirror, PACKAGES)
      if (typeof debs !== 'string') return debs
      // Unpacked beside the final root and renamed into place: a concurrent or broken run never
      // leaves a half-filled root that looks complete.
      const staging = join(work, 'root')
      const x = unpack(debs, staging)
      if (x) return x
      if (!unpacked(engineAt(staging)))
        return { ok: false, reason: 'the unpacked packages lack llama-server, the loader or the CPU backend' }
      try {
        renameSync(staging, engine.root)
      } catch (e) {
        // Another run got there first.
        if (!unpacked(engine))
          return { ok: false, reason: `could not place the engine: ${(e as Error).message}` }
      }
    }
    return makeRouter(engine, work, mirror)
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
}

/** Downloads `packages` from sid into `<work>/debs`; returns that directory, or why not. */
function aptDownload(work: string, mirror: string, packages: string[]): string | FetchResult {
  for (const d of ['lists/partial', 'cache/archives/partial', 'debs'])
    mkdirSync(join(work, d), { recursive: true })
  const sources = join(work, 'sources.list')
  const keyring = '/usr/share/keyrings/debian-archive-keyring.gpg'
  const signed = existsSync(keyring) ? `[signed-by=${keyring}] ` : ''
  writeFileSync(sources, `deb ${signed}${mirror} sid main\n`)
  const status = join(work, 'status')
  writeFileSync(status, '')
  const apt = [
    'apt-get',
    '-q',
    '-o',
    `Dir::Etc::SourceList=${sources}`,
    '-o',
    'Dir::Etc::SourceParts=/dev/null',
    '-o',
    'Dir::Etc::Preferences=/dev/null',
    '-o',
    'Dir::Etc::PreferencesParts=/dev/null',
    '-o',
    `Dir::State::Lists=${join(work, 'lists')}`,
    '-o',
    `Dir::State::status=${status}`,
    '-o',
    `Dir::Cache=${join(work, 'cache')}`,
    '-o',
    'Debug::NoLocking=1',
    '-o',
    'APT::Architecture=amd64',
    '-o',
    'APT::Sandbox::User=root',
  ]
  const update = run([...apt, 'update'])
  if (!update.ok) return { ok: false, reason: `apt-get update of sid failed: ${tail(update.output)}` }
  const download = run([...apt, 'download', ...packages], join(work, 'debs'))
  if (!download.ok) return { ok: false, reason: `apt-get download failed: ${tail(download.output)}` }
  return join(work, 'debs')
}

/** Unpacks every .deb of `debs` into `root`; null, or why not. */
function unpack(debs: string, root: string): FetchResult | null {
  for (const deb of readdirSync(debs).filter((f) => f.endsWith('.deb'))) {
    const x = run(['dpkg-deb', '-x', join(debs, deb), root])
    if (!x.ok) return { ok: false, reason: `dpkg-deb -x ${deb} failed: ${tail(x.output)}` }
  }
  return null
}

/**
 * The router's copy of the binary (interpreter: the root's loader) and its script, made once. A
 * root unpacked before patchelf was among the packages gets patchelf first (unpacked into it).
 */
function makeRouter(engine: Engine, work: string, mirror: string): FetchResult {
  if (complete(engine)) return { ok: true, engine }
  const patchelf = join(engine.root, 'usr/bin/patchelf')
  if (!existsSync(patchelf)) {
    const debs = aptDownload(join(work, 'patchelf'), mirror, ['patchelf'])
    if (typeof debs !== 'string') return debs
    const x = unpack(debs, engine.root)
    if (x) return x
    if (!existsSync(patchelf)) return { ok: false, reason: 'the patchelf package holds no usr/bin/patchelf' }
  }
  // Made beside the final names and renamed into place, like the root.
  const copy = `${engine.routerBinary}.${process.pid}.tmp`
  copyFileSync(engine.binary, copy)
  const patched = run([
    engine.loader,
    '--library-path',
    engine.libraryPath,
    patchelf,
    '--set-interpreter',
    engine.loader,
    copy,
  ])
  if (!patched.ok) {
    rmSync(copy, { force: true })
    return { ok: false, reason: `patchelf --set-interpreter failed: ${tail(patched.output)}` }
  }
  chmodSync(copy, 0o755)
  renameSync(copy, engine.routerBinary)
  const script = `${engine.router}.${process.pid}.tmp`
  const quote = (s: string) => `'${s.replaceAll("'", "'\\''")}'`
  writeFileSync(
    script,
    [
      '#!/bin/sh',
      '# llama-server from the unpacked sid root, runnable in router mode (scripts/llama-server.ts).',
      ...Object.entries(engine.routerEnv).map(([k, v]) => `export ${k}=${quote(v)}`),
      `exec ${quote(engine.routerBinary)} "$@"`,
      '',
    ].join('\n'),
  )
  chmodSync(script, 0o755)
  renameSync(script, engine.router)
  return { ok: true, engine }
}

const tail = (s: string) => s.split('\n').slice(-3).join(' | ')

// ── the tiny model ──────────────────────────────────────────────────────────────────────────────

export const TINY = { layers: 2, width: 64, heads: 4, ffn: 192, context: 4096, seed: 20_261_123 } as const

/** A model's shape: the tiny model's by default. */
export interface ModelShape {
  layers: number
  width: number
  heads: number
  ffn: number
  context: number
}

/**
 * A model large enough that prefill dominates a request on a CPU (bench/prefix.ts: prompt caching
 * is measured by what it saves): 4 layers of width 128, ~0.9 M F32 weights (~3.7 MB), one token a
 * byte, as the tiny model. A cached prompt token costs it about a fifth of one computed.
 */
export const PREFILL: ModelShape = { layers: 4, width: 128, heads: 4, ffn: 384, context: 16_384 }

/** Deterministic floats in [-1, 1) (mulberry32). */
function random(seed: number) {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return (((t ^ (t >>> 14)) >>> 0) / 4294967296) * 2 - 1
  }
}

type Value =
  | { u32: number }
  | { f32: number }
  | { str: string }
  | { strs: string[] }
  | { f32s: number[] }
  | { i32s: number[] }

/** GGUF v3 writer (ggml docs/gguf.md): header, metadata, tensor infos, aligned tensor data. */
class Gguf {
  private readonly parts: Uint8Array[] = []
  private readonly enc = new TextEncoder()
  private push(bytes: Uint8Array) {
    this.parts.push(bytes)
  }
  u32(n: number) {
    const b = new Uint8Array(4)
    new DataView(b.buffer).setUint32(0, n, true)
    this.push(b)
  }
  i32(n: number) {
    const b = new Uint8Array(4)
    new DataView(b.buffer).setInt32(0, n, true)
    this.push(b)
  }
  u64(n: number) {
    const b = new Uint8Array(8)
    new DataView(b.buffer).setBigUint64(0, BigInt(n), true)
    this.push(b)
  }
  f32(n: number) {
    const b = new Uint8Array(4)
    new DataView(b.buffer).setFloat32(0, n, true)
    this.push(b)
  }
  str(s: string) {
    const b = this.enc.encode(s)
    this.u64(b.length)
    this.push(b)
  }
  value(v: Value) {
    if ('u32' in v) {
      this.u32(T_U32)
      this.u32(v.u32)
    } else if ('f32' in v) {
      this.u32(T_F32)
      this.f32(v.f32)
    } else if ('str' in v) {
      this.u32(T_STRING)
      this.str(v.str)
    } else {
      const [type, items, write] =
        'strs' in v
          ? ([T_STRING, v.strs, (x: string) => this.str(x)] as const)
          : 'f32s' in v
            ? ([T_F32, v.f32s, (x: number) => this.f32(x)] as const)
            : ([T_I32, v.i32s, (x: number) => this.i32(x)] as const)
      this.u32(T_ARRAY)
      this.u32(type)
      this.u64(items.length)
      for (const x of items) (write as (x: unknown) => void)(x)
    }
  }
  raw(b: Uint8Array) {
    this.push(b)
  }
  get length() {
    return this.parts.reduce((n, p) => n + p.length, 0)
  }
  bytes() {
    return Buffer.concat(this.parts)
  }
}

const T_U32 = 4
const T_I32 = 5
const T_F32 = 6
const T_STRING = 8
const T_ARRAY = 9
const ALIGN = 32

/** The tiny model's bytes: the same on every call with the same seed; other weights for another. */
export function tinyModel(seed: number = TINY.seed, shape: ModelShape = TINY): Uint8Array {
  const { layers, width, heads, ffn, context } = shape
  // SentencePiece-style vocabulary: three control tokens, then every byte.
  const tokens = ['<unk>', '<s>', '</s>']
  const types = [2, 3, 3]
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`)
    types.push(6)
  }
  const vocab = tokens.length

  const rnd = random(seed)
  const tensors: { name: string; dims: number[]; data: Float32Array }[] = []
  const add = (name: string, dims: number[], fill: 'ones' | number) => {
    const data = new Float32Array(dims.reduce((a, b) => a * b, 1))
    for (let i = 0; i < data.length; i++) data[i] = fill === 'ones' ? 1 : rnd() * fill
    tensors.push({ name, dims, data })
  }
  add('token_embd.weight', [width, vocab], 0.5)
  for (let l = 0; l < layers; l++) {
    add(`blk.${l}.attn_norm.weight`, [width], 'ones')
    for (const m of ['attn_q', 'attn_k', 'attn_v', 'attn_output'])
      add(`blk.${l}.${m}.weight`, [width, width], 0.2)
    add(`blk.${l}.ffn_norm.weight`, [width], 'ones')
    add(`blk.${l}.ffn_gate.weight`, [width, ffn], 0.2)
    add(`blk.${l}.ffn_up.weight`, [width, ffn], 0.2)
    add(`blk.${l}.ffn_down.weight`, [ffn, width], 0.2)
  }
  add('output_norm.weight', [width], 'ones')
  add('output.weight', [width, vocab], 0.5)

  const template =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}" +
    '{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}'
  const kv: [string, Value][] = [
    ['general.architecture', { str: 'llama' }],
    ['general.name', { str: 'gridkeep-tiny' }],
    ['general.alignment', { u32: ALIGN }],
    ['llama.context_length', { u32: context }],
    ['llama.embedding_length', { u32: width }],
    ['llama.block_count', { u32: layers }],
    ['llama.feed_forward_length', { u32: ffn }],
    ['llama.attention.head_count', { u32: heads }],
    ['llama.attention.head_count_kv', { u32: heads }],
    ['llama.rope.dimension_count', { u32: width / heads }],
    ['llama.attention.layer_norm_rms_epsilon', { f32: 1e-5 }],
    ['tokenizer.ggml.model', { str: 'llama' }],
    ['tokenizer.ggml.tokens', { strs: tokens }],
    ['tokenizer.ggml.scores', { f32s: tokens.map(() => 0) }],
    ['tokenizer.ggml.token_type', { i32s: types }],
    ['tokenizer.ggml.unknown_token_id', { u32: 0 }],
    ['tokenizer.ggml.bos_token_id', { u32: 1 }],
    ['tokenizer.ggml.eos_token_id', { u32: 2 }],
    ['tokenizer.chat_template', { str: template }],
  ]

  const g = new Gguf()
  g.raw(new TextEncoder().encode('GGUF'))
  g.u32(3)
  g.u64(tensors.length)
  g.u64(kv.length)
  for (const [key, value] of kv) {
    g.str(key)
    g.value(value)
  }
  let offset = 0
  const offsets: number[] = []
  for (const t of tensors) {
    g.str(t.name)
    g.u32(t.dims.length)
    for (const d of t.dims) g.u64(d)
    g.u32(0) // GGML_TYPE_F32
    g.u64(offset)
    offsets.push(offset)
    offset += align(t.data.byteLength)
  }
  g.raw(new Uint8Array(align(g.length) - g.length))
  for (const t of tensors) {
    const bytes = new Uint8Array(t.data.buffer)
    g.raw(bytes)
    g.raw(new Uint8Array(align(bytes.length) - bytes.length))
  }
  return g.bytes()
}

const align = (n: number) => Math.ceil(n / ALIGN) * ALIGN

/** Writes the tiny model to `path` (unless it is already there) and returns the path. */
export async function writeTinyModel(
  path = join(cacheDir(), 'gridkeep-tiny.gguf'),
  seed: number = TINY.seed,
  shape: ModelShape = TINY,
): Promise<string> {
  const bytes = tinyModel(seed, shape)
  const file = Bun.file(path)
  if ((await file.exists()) && file.size === bytes.length && Buffer.compare(await file.bytes(), bytes) === 0)
    return path
  mkdirSync(join(path, '..'), { recursive: true })
  const tmp = `${path}.${process.pid}.tmp`
  await Bun.write(tmp, bytes)
  renameSync(tmp, path)
  return path
}

// ── running it ──────────────────────────────────────────────────────────────────────────────────

export interface LlamaServer {
  url: string
  port: number
  pid: number
  modelPath: string
  /** The name llama-server lists in /v1/models (the model file's name). */
  modelId: string
  /** Ends the process (SIGKILL when `hard`); resolves when it has exited. */
  stop(hard?: boolean): Promise<void>
  /** What the server wrote to stdout/stderr so far (for failure messages). */
  output(): string
}

export interface StartOptions {
  engine: Engine
  modelPath: string
  /** Fixed port (a restart on the same address); default a free one. */
  port?: number
  /** Parallel slots (-np). */
  slots?: number
  /** Context per slot; the total context is slots × this. */
  contextPerSlot?: number
  threads?: number
  /**
   * HTTP worker threads. llama-server's default (a few) makes a connection beyond them wait for an
   * idle keep-alive connection to time out (seconds): a client with more requests in flight than
   * that stalls. The default here covers the daemon's and the benchmark's concurrency.
   */
  httpThreads?: number
  /** Name served in /v1/models (--alias); default the model file's path. */
  alias?: string
  /** More llama-server flags. */
  extraArgs?: string[]
  /** Write the server's output to this file instead of keeping it (a server that outlives us). */
  logFile?: string
}

export function freePort(): number {
  const listener = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
  const port = listener.port
  listener.stop(true)
  return port
}

/** Starts llama-server on loopback and resolves once /health answers 200. */
export async function startLlamaServer(o: StartOptions): Promise<LlamaServer> {
  const port = o.port ?? freePort()
  const slots = o.slots ?? 4
  const ctx = slots * (o.contextPerSlot ?? 512)
  const proc = spawn(
    [
      o.engine.loader,
      '--library-path',
      o.engine.libraryPath,
      o.engine.binary,
      '--model',
      o.modelPath,
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
      '--embeddings',
      '--pooling',
      'mean',
      '--parallel',
      String(slots),
      '--ctx-size',
      String(ctx),
      '--threads',
      String(o.threads ?? 1),
      '--threads-http',
      String(o.httpThreads ?? 64),
      '--no-webui',
      ...(o.alias ? ['--alias', o.alias] : []),
      ...(o.extraArgs ?? []),
    ],
    {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', GGML_BACKEND_PATH: o.engine.backend },
      stdout: o.logFile ? Bun.file(o.logFile) : 'pipe',
      stderr: o.logFile ? Bun.file(o.logFile) : 'pipe',
    },
  )
  let out = ''
  const pump = async (s: ReadableStream<Uint8Array> | number | undefined) => {
    if (!(s instanceof ReadableStream)) return
    const dec = new TextDecoder()
    for await (const chunk of s) out = (out + dec.decode(chunk)).slice(-20_000)
  }
  void pump(proc.stdout)
  void pump(proc.stderr)
  const url = `http://127.0.0.1:${port}`
  const server: LlamaServer = {
    url,
    port,
    pid: proc.pid,
    modelPath: o.modelPath,
    modelId: o.modelPath.split('/').pop()!,
    async stop(hard = false) {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(hard ? 'SIGKILL' : 'SIGTERM')
      await proc.exited
    },
    output: () => (o.logFile ? `(output in ${o.logFile})` : out),
  }
  const deadline = Date.now() + 30_000
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null)
      throw new Error(`llama-server exited (${proc.exitCode ?? proc.signalCode}): ${out.slice(-2000)}`)
    try {
      const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) })
      if (res.ok) break
    } catch {}
    if (Date.now() > deadline) {
      await server.stop(true)
      throw new Error(`llama-server did not become healthy within 30 s: ${out.slice(-2000)}`)
    }
    await Bun.sleep(50)
  }
  // The name it serves, as the daemon will see it.
  const models = (await (await fetch(`${url}/v1/models`)).json()) as { data?: { id: string }[] }
  server.modelId = models.data?.[0]?.id ?? server.modelId
  return server
}

/**
 * A router of our own (not the daemon's): `engine.router` over `modelsDir` on `port`, loading
 * nothing until asked (`--no-models-autoload`, no limit on loaded models). Stop it with `kill()`.
 */
export function spawnRouter(engine: Engine, modelsDir: string, port: number) {
  return spawn(
    [
      engine.router,
      '--models-dir',
      modelsDir,
      '--no-models-autoload',
      '--models-max',
      '0',
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
    ],
    { stdout: 'ignore', stderr: 'ignore' },
  )
}

if (import.meta.main) {
  const [command, arg] = process.argv.slice(2)
  if (command === 'fetch') {
    const r = fetchEngine()
    if (!r.ok) {
      console.error(`could not fetch llama-server: ${r.reason}`)
      process.exit(1)
    }
    console.log(`${r.engine.root}\nrouter: ${r.engine.router}`)
  } else if (command === 'model') {
    const seed = process.argv[4]
    const path = await writeTinyModel(arg, seed === undefined ? TINY.seed : Number(seed))
    const sha = new Bun.CryptoHasher('sha256').update(await Bun.file(path).bytes()).digest('hex')
    console.log(`${path} sha256:${sha}`)
  } else if (command === 'start') {
    const r = fetchEngine()
    if (!r.ok) {
      console.error(`could not fetch llama-server: ${r.reason}`)
      process.exit(1)
    }
    const port = freePort()
    const logFile = join(cacheDir(), `llama-server-${port}.log`)
    const server = await startLlamaServer({
      engine: r.engine,
      modelPath: await writeTinyModel(),
      port,
      alias: 'gridkeep-tiny',
      logFile,
    })
    console.log(`llama-server ${server.url} pid ${server.pid} model ${server.modelId} log ${logFile}`)
    // The server outlives this script; stop it with `kill PID`.
    process.exit(0)
  } else {
    console.error('usage: bun scripts/llama-server.ts fetch | model [PATH] [SEED] | start')
    process.exit(2)
  }
}
