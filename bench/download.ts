import { mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { downloadModel, modelsDirLayout } from '../src/daemon/download'
import { setLogSink } from '../src/lib/logger'

// Model download throughput (docs/worker.md "Downloads"): the daemon's downloader (hashing every
// byte, writing under a temporary name, verifying, renaming into place) vs a plain `fetch` of the
// same file written to disk, both from the stand-in hub (test/helpers/hub.ts) running in its own
// process on loopback. Paired rounds, alternating; the median ratio is the figure (goal ≥ 90 %).
// bench/swap.ts runs it as its download case; alone:
//
//   bun run bench/download.ts                 a 1 GB file, 5 paired rounds, over loopback and over a
//                                             400 MB/s link (BENCH_LINK_MBPS)
//   BENCH_QUICK=1 bun run bench/download.ts   200 MB, 3 rounds
//   BENCH_BYTES=N BENCH_ROUNDS=N              other sizes

export interface DownloadFigures {
  bytes: number
  linkMBps: number
  /** Per round: plain fetch and downloader, bytes per second. */
  rounds: { plain: number; downloader: number }[]
  /** The median of the rounds' downloader / plain. */
  ratio: number
  /** SHA-256 alone over as many bytes, in memory, on one core. */
  sha256: number
}

export async function downloadCase(o: {
  bytes: number
  rounds: number
  /** The hub's link speed in MB/s (a network's); 0: as fast as loopback goes. */
  linkMBps?: number
}): Promise<DownloadFigures> {
  const hubArgs = [String(o.bytes), String(o.linkMBps ?? 0)]
  const proc = Bun.spawn(['bun', join(import.meta.dir, '../test/helpers/hub.ts'), ...hubArgs], {
    stdout: 'pipe',
    stderr: 'inherit',
  })
  const dir = mkdtempSync(join(tmpdir(), 'gk-bench-download-'))
  try {
    const { value } = await proc.stdout.getReader().read()
    const hub = JSON.parse(new TextDecoder().decode(value).trim().split('\n')[0]!) as {
      url: string
      repo: string
      path: string
      sha256: string
      size: number
    }
    const url = `${hub.url}/${hub.repo}/resolve/main/${hub.path}`

    const plain = async () => {
      const dest = join(dir, 'plain.gguf')
      const t0 = performance.now()
      await Bun.write(dest, await fetch(url))
      const s = (performance.now() - t0) / 1000
      if (statSync(dest).size !== hub.size) throw new Error('plain fetch: short file')
      rmSync(dest)
      return hub.size / s
    }
    const downloader = async () => {
      const layout = modelsDirLayout(dir, 'model', [
        { path: hub.path, sha256: hub.sha256, size_bytes: hub.size },
      ])
      const t0 = performance.now()
      await downloadModel({ hub: { url: hub.url }, repo: hub.repo, revision: 'main', layout, maxBytes: 1e12 })
      const s = (performance.now() - t0) / 1000
      rmSync(layout.dest)
      return hub.size / s
    }

    // One of each first, so that both find the hub and the page cache warm.
    await plain()
    await downloader()
    const rounds: DownloadFigures['rounds'] = []
    for (let i = 0; i < o.rounds; i++) rounds.push({ plain: await plain(), downloader: await downloader() })
    const ratios = rounds.map((r) => r.downloader / r.plain).sort((a, b) => a - b)
    return {
      bytes: hub.size,
      linkMBps: o.linkMBps ?? 0,
      rounds,
      ratio: ratios[Math.floor(ratios.length / 2)]!,
      sha256: hashRate(hub.size),
    }
  } finally {
    proc.kill('SIGTERM')
    await proc.exited
    rmSync(dir, { recursive: true, force: true })
  }
}

/** SHA-256 alone over `bytes`, in memory: the work a verifying download adds to a fetch. */
function hashRate(bytes: number): number {
  const block = new Uint8Array(1 << 22).fill(7)
  const hasher = new Bun.CryptoHasher('sha256')
  const n = Math.ceil(bytes / block.length)
  const t0 = performance.now()
  for (let i = 0; i < n; i++) hasher.update(block)
  hasher.digest()
  return (n * block.length) / ((performance.now() - t0) / 1000)
}

export const mbps = (bps: number) => `${(bps / 1e6).toFixed(0)} MB/s`

/** The figures as lines (this script's output; bench/swap.ts prints them indented). */
export function downloadLines(f: DownloadFigures): string[] {
  return [
    ...f.rounds.map(
      (r, i) =>
        `round ${i + 1}: plain fetch ${mbps(r.plain)}, downloader ${mbps(r.downloader)} (verified, renamed), ${(100 * (r.downloader / r.plain)).toFixed(1)} %`,
    ),
    `sha256 alone: ${mbps(f.sha256)} on one core (a fetch that also hashes every byte on the same thread tops out near 1 / (1/fetch + 1/sha256))`,
    `download of ${(f.bytes / 1e9).toFixed(2)} GB${f.linkMBps ? ` over a ${f.linkMBps} MB/s link` : ' over loopback'}: median ${(100 * f.ratio).toFixed(1)} % of a plain fetch (goal ≥ 90 %: ${f.ratio >= 0.9 ? 'met' : 'MISSED'})`,
  ]
}

if (import.meta.main) {
  const quick = !!process.env.BENCH_QUICK || process.argv.includes('--quick')
  setLogSink(() => {})
  const bytes = Number(process.env.BENCH_BYTES ?? (quick ? 2e8 : 1e9))
  const rounds = Number(process.env.BENCH_ROUNDS ?? (quick ? 3 : 5))
  // Over loopback the hub, both ends of the connection and the hash share this machine's cores:
  // the figure is what the hash costs in CPU. Over a link of a network's speed (a hub's real case)
  // the hash has to keep up with the link, not with loopback.
  for (const linkMBps of [0, Number(process.env.BENCH_LINK_MBPS ?? 400)])
    for (const line of downloadLines(await downloadCase({ bytes, rounds, linkMBps }))) console.log(line)
}
