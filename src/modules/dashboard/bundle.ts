import { basename } from 'node:path'
import page from '../../../web/index.html'

// The dashboard's bundle (docs/api.md §11), from Bun's HTML import of web/index.html. `bun build
// --compile` bundles it at build time and embeds the files (`page.files`); from source the same
// entry point is bundled once, in memory, at the first request. Either way the page and its assets
// are then served by ordinary Elysia routes (src/modules/dashboard/index.ts), so they get the
// request id, the request log line and the metrics of every other route.

export interface Asset {
  body: Blob
  type: string
}

export interface DashboardBundle {
  html: string
  /** By file name, as linked from the page under ASSET_PREFIX. */
  assets: Map<string, Asset>
}

export const ASSET_PREFIX = '/assets/'

interface EmbeddedFile {
  path: string
  loader: string
  headers: Record<string, string>
}

// Process-wide and immutable (the same bytes for every server of the process), so one promise is
// kept for all of them rather than per Deps.
let loading: Promise<DashboardBundle> | undefined
export const loadDashboard = (): Promise<DashboardBundle> => {
  loading ??= load().catch((error) => {
    loading = undefined
    throw error
  })
  return loading
}

async function load(): Promise<DashboardBundle> {
  const files = (page as { files?: EmbeddedFile[] }).files
  return files ? fromEmbedded(files) : fromSource()
}

async function fromEmbedded(files: EmbeddedFile[]): Promise<DashboardBundle> {
  const assets = new Map<string, Asset>()
  let html = ''
  for (const f of files) {
    if (f.loader === 'html') html = await Bun.file(f.path).text()
    else assets.set(basename(f.path), { body: Bun.file(f.path), type: f.headers['content-type'] ?? '' })
  }
  // The compiler links assets from the root (`/chunk-….js`); --public-path does not apply to HTML
  // imports. They are moved under ASSET_PREFIX so the page never claims root paths.
  return { html: underPrefix(html), assets }
}

async function fromSource(): Promise<DashboardBundle> {
  const build = await Bun.build({
    entrypoints: [page.index],
    target: 'browser',
    minify: true,
    publicPath: ASSET_PREFIX,
  })
  if (!build.success) throw new AggregateError(build.logs, 'the dashboard bundle failed to build')
  const assets = new Map<string, Asset>()
  let html = ''
  for (const out of build.outputs) {
    if (out.path.endsWith('.html')) html = await out.text()
    else assets.set(basename(out.path), { body: out, type: out.type })
  }
  return { html, assets }
}

function underPrefix(html: string): string {
  const move = (attr: string) => ({
    element(el: HTMLRewriterTypes.Element) {
      const value = el.getAttribute(attr)
      if (value?.startsWith('/') && !value.startsWith(ASSET_PREFIX))
        el.setAttribute(attr, ASSET_PREFIX + value.slice(1))
    },
  })
  return new HTMLRewriter().on('script[src]', move('src')).on('link[href]', move('href')).transform(html)
}
