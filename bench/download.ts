import { mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { downloadModel, modelsDirLayout } from '../src/daemon/download'
import { setLogSink } from '../src/lib/logger'

// Model download throughput (docs/worker.md "Downloads"): the daemon's downloader (hashing every
// byte, writing under a temporary name, verifying, renaming into place) vs a plain `fetch` of the
// same file written to disk, both from the stand-in hub (test/helpers/hub.ts) running in its own
// process on loopback. Paired rounds, alternating; the median ratio is the figure.
//
//   bun run bench/download.ts                 a 1 GB file, 5 paired rounds
//   BENCH_QUICK=1 bun run bench/download.ts   200 MB, 3 rounds
//   BENCH_BYTES=N BENCH_ROUNDS=N              other sizes

const QUICK = !!process.env.BENCH_QUICK || process.argv.includes('--quick')
const BYTES = Number(process.env.BENCH_BYTES ?? (QUICK ? 2e8 : 1e9))
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? (QUICK ? 3 : 5))

setLogSink(() => {})

const proc = Bun.spawn(['bun', join(import.meta.dir, '../test/helpers/hub.ts'), String(BYTES)], {
  stdout: 'pipe',
  stderr: 'inherit',
})
const { value } = await proc.stdout.getReader().read()
const hub = JSON.parse(new TextDecoder().decode(value).trim().split('\n')[0]!) as {
  url: string
  repo: string
  path: string
  sha256: string
  size: number
}
const url = `${hub.url}/${hub.repo}/resolve/main/${hub.path}`
const dir = mkdtempSync(join(tmpdir(), 'gk-bench-download-'))

async function plain(): Promise<number> {
  const dest = join(dir, 'plain.gguf')
  const t0 = performance.now()
  await Bun.write(dest, await fetch(url))
  const s = (performance.now() - t0) / 1000
  if (statSync(dest).size !== hub.size) throw new Error('plain fetch: short file')
  rmSync(dest)
  return hub.size / s
}

async function downloader(): Promise<number> {
  const layout = modelsDirLayout(dir, 'model', [{ path: hub.path, sha256: hub.sha256, size_bytes: hub.size }])
  const t0 = performance.now()
  await downloadModel({ hub: { url: hub.url }, repo: hub.repo, revision: 'main', layout, maxBytes: 1e12 })
  const s = (performance.now() - t0) / 1000
  rmSync(layout.dest)
  return hub.size / s
}

/** SHA-256 alone over the same bytes, in memory: the work a verifying download adds to a fetch. */
function hashRate(): number {
  const block = new Uint8Array(1 << 22).fill(7)
  const hasher = new Bun.CryptoHasher('sha256')
  const n = Math.ceil(hub.size / block.length)
  const t0 = performance.now()
  for (let i = 0; i < n; i++) hasher.update(block)
  hasher.digest()
  return (n * block.length) / ((performance.now() - t0) / 1000)
}

const mb = (bps: number) => `${(bps / 1e6).toFixed(0)} MB/s`
try {
  // One of each first, so that both find the hub and the page cache warm.
  await plain()
  await downloader()
  const ratios: number[] = []
  for (let i = 0; i < ROUNDS; i++) {
    const base = await plain()
    const ours = await downloader()
    ratios.push(ours / base)
    console.log(
      `round ${i + 1}: plain fetch ${mb(base)}, downloader ${mb(ours)} (verified, renamed), ${(100 * (ours / base)).toFixed(1)} %`,
    )
  }
  const hash = hashRate()
  console.log(
    `sha256 alone: ${mb(hash)} on one core (a fetch that also hashes every byte on the same thread tops out near 1 / (1/fetch + 1/sha256))`,
  )
  const sorted = [...ratios].sort((a, b) => a - b)
  const median = sorted[Math.floor(sorted.length / 2)]!
  console.log(
    `download of ${(BYTES / 1e9).toFixed(2)} GB: median ${(100 * median).toFixed(1)} % of a plain fetch (goal ≥ 90 %)`,
  )
} finally {
  proc.kill('SIGTERM')
  rmSync(dir, { recursive: true, force: true })
}
