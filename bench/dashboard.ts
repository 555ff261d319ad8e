// Dashboard budgets: all JS+CSS ≤ 150 KB gzipped; the first page usable ≤ 1 s on loopback.
// Each figure beside a bare baseline measured in the same run: a Preact "hello" page bundled the
// same way, and a static HTML page with one button served by a bare Bun.serve.
//
//   bun run bench/dashboard.ts               (5 page loads each)
//   BENCH_QUICK=1 bun run bench/dashboard.ts (2 page loads each)

import { copyFileSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { gzipSync, spawn } from 'bun'
import { loadDashboard } from '../src/modules/dashboard/bundle'
import { startTestServer } from '../test/helpers/app'
import { launchBrowser } from '../test/helpers/browser'

const quick = !!process.env.BENCH_QUICK || process.argv.includes('--quick')
const LOADS = quick ? 2 : 5
const BUDGET_KB = 150
const root = resolve(import.meta.dir, '..')
const out = join(root, 'bench/.out/dashboard')
rmSync(out, { recursive: true, force: true })
mkdirSync(out, { recursive: true })

const kb = (bytes: number) => Math.round((bytes / 1024) * 10) / 10

async function gzipped(files: Iterable<{ name: string; body: Blob }>) {
  let raw = 0
  let gz = 0
  const rows: string[] = []
  for (const f of files) {
    const bytes = new Uint8Array(await f.body.arrayBuffer())
    const z = gzipSync(bytes).byteLength
    raw += bytes.byteLength
    gz += z
    rows.push(
      `  ${f.name.padEnd(28)} ${String(kb(bytes.byteLength)).padStart(8)} KB  ${String(kb(z)).padStart(7)} KB gz`,
    )
  }
  return { raw, gz, rows }
}

const isCode = (name: string) => name.endsWith('.js') || name.endsWith('.css')

// 1. Size: what the server sends from source (minified), and what the compiled binary serves
// (`bun run build` minifies whitespace and syntax, not identifiers), when dist/gridkeep exists.
const dashboard = await loadDashboard()
const shipped = await gzipped(
  [...dashboard.assets].filter(([n]) => isCode(n)).map(([name, a]) => ({ name, body: a.body })),
)

writeFileSync(
  join(out, 'index.html'),
  '<!doctype html><div id="root"></div><script type="module" src="./main.tsx"></script>',
)
writeFileSync(
  join(out, 'main.tsx'),
  "import { render } from 'preact'\nrender(<h1>hello</h1>, document.getElementById('root')!)\n",
)
writeFileSync(
  join(out, 'tsconfig.json'),
  JSON.stringify({ compilerOptions: { jsx: 'react-jsx', jsxImportSource: 'preact' } }),
)
const bare = await Bun.build({ entrypoints: [join(out, 'index.html')], target: 'browser', minify: true })
const baseline = await gzipped(
  bare.outputs.filter((o) => isCode(o.path)).map((o) => ({ name: o.path.split('/').pop()!, body: o })),
)

console.log('dashboard JS+CSS, as served:')
for (const r of shipped.rows) console.log(r)
console.log(
  `  total: ${kb(shipped.raw)} KB, ${kb(shipped.gz)} KB gzipped (budget ${BUDGET_KB} KB: ${shipped.gz <= BUDGET_KB * 1024 ? 'within' : 'OVER'})`,
)
console.log(
  `  bare Preact page: ${kb(baseline.gz)} KB gzipped; dashboard/bare = ${(shipped.gz / baseline.gz).toFixed(1)}×`,
)

const binary = process.env.GRIDKEEP_BINARY ?? join(root, 'dist/gridkeep')
if (existsSync(binary)) {
  const dir = join(out, 'binary')
  mkdirSync(dir, { recursive: true })
  copyFileSync(binary, join(dir, 'gridkeep'))
  const probe = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response() })
  const port = probe.port
  probe.stop(true)
  const proc = spawn([join(dir, 'gridkeep'), 'serve'], {
    cwd: dir,
    env: {
      PATH: process.env.PATH,
      PORT: String(port),
      HOST: '127.0.0.1',
      ADMIN_PASSWORD: 'bench-password-1',
    },
    stdout: 'ignore',
    stderr: 'ignore',
  })
  try {
    const base = `http://127.0.0.1:${port}`
    let html = ''
    for (let i = 0; i < 200 && !html; i++) {
      html = await fetch(base).then(
        (r) => (r.ok ? r.text() : ''),
        () => '',
      )
      if (!html) await Bun.sleep(50)
    }
    const names = [...html.matchAll(/"\/assets\/([^"]+)"/g)].map((m) => m[1]!).filter(isCode)
    const files = await Promise.all(
      names.map(async (name) => ({ name, body: await (await fetch(`${base}/assets/${name}`)).blob() })),
    )
    const compiled = await gzipped(files)
    console.log(`compiled binary (${binary}):`)
    for (const r of compiled.rows) console.log(r)
    console.log(
      `  total: ${kb(compiled.raw)} KB, ${kb(compiled.gz)} KB gzipped (budget ${BUDGET_KB} KB: ${compiled.gz <= BUDGET_KB * 1024 ? 'within' : 'OVER'}); binary/bare = ${(compiled.gz / baseline.gz).toFixed(1)}×`,
    )
  } finally {
    proc.kill('SIGTERM')
    await proc.exited
  }
} else console.log('compiled binary: not measured (run `bun run build` first)')

// 2. First page usable: from navigation to the "Sign in" button enabled, over loopback.
const server = await startTestServer()
const bareServer = Bun.serve({
  hostname: '127.0.0.1',
  port: 0,
  fetch: () =>
    new Response('<!doctype html><form><label>Email <input></label><button>Sign in</button></form>', {
      headers: { 'content-type': 'text/html' },
    }),
})
const browser = await launchBrowser()
async function usable(url: string): Promise<number[]> {
  const times: number[] = []
  for (let i = 0; i < LOADS + 1; i++) {
    const context = await browser.newContext()
    const page = await context.newPage()
    const started = performance.now()
    await page.goto(url)
    await page.getByRole('button', { name: 'Sign in' }).waitFor()
    const ms = performance.now() - started
    if (i > 0) times.push(ms) // the first load warms the server's bundle and the browser
    await context.close()
  }
  return times.sort((a, b) => a - b)
}
const median = (xs: number[]) => xs[Math.floor(xs.length / 2)]!
try {
  const dash = await usable(server.url)
  const plain = await usable(bareServer.url.href)
  console.log(`first page usable (navigation → "Sign in" button), median of ${LOADS} fresh contexts:`)
  console.log(
    `  dashboard: ${median(dash).toFixed(0)} ms (budget 1000 ms: ${median(dash) <= 1000 ? 'within' : 'OVER'})`,
  )
  console.log(
    `  bare static page: ${median(plain).toFixed(0)} ms; dashboard/bare = ${(median(dash) / median(plain)).toFixed(1)}×`,
  )
} finally {
  await browser.close()
  bareServer.stop(true)
  await server.stop()
}
