import { expect } from 'bun:test'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { type Browser, type BrowserContext, type Page, chromium as playwright } from 'playwright-core'
import { CHROMIUM, chromium } from './requires'

// Browser tests (issue 9) drive Debian's chromium-headless-shell through playwright-core. Every
// session fails its test on a request to another origin, on a console error, and on anything in
// localStorage (the token lives in memory and sessionStorage only: docs/api.md §11).

/** GK_SCREENSHOTS=1 regenerates docs/screenshots/*.png (README "Dashboard"). */
const SCREENSHOTS = process.env.GK_SCREENSHOTS === '1'
const SCREENSHOT_DIR = join(import.meta.dir, '../../docs/screenshots')

export async function launchBrowser(): Promise<Browser> {
  if (!chromium.ok) throw new Error(`${chromium.what} is missing: ${chromium.fix}`)
  return playwright.launch({
    executablePath: CHROMIUM,
    // Without the background-networking flags Chromium tries outside hosts, which this closed
    // network refuses; each run gets a fresh profile (playwright's temporary user-data-dir).
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  })
}

export interface Session {
  page: Page
  context: BrowserContext
  /** Console errors and other-origin requests seen so far. */
  problems: string[]
  /** HTTP statuses a test provokes on purpose (the browser logs each as a console error). */
  allowStatus(...statuses: number[]): void
  /** Lets console errors about unreachable servers through (the "server went away" test). */
  allowOffline(): void
  screenshot(name: string): Promise<void>
  /** Checks the session's rules and closes it. */
  finish(): Promise<void>
}

/** `alsoAllow`: other origins the test sends the browser to on purpose (an identity provider). */
export async function openSession(
  browser: Browser,
  origin: string,
  o: { alsoAllow?: string[] } = {},
): Promise<Session> {
  const context = await browser.newContext({
    acceptDownloads: true,
    viewport: { width: 1280, height: 860 },
  })
  const problems: string[] = []
  const onOurPage = (url: string) => !o.alsoAllow?.some((other) => url.startsWith(`${other}/`))
  const allowed = new Set<number>()
  let offline = false
  await context.route('**/*', (route) => {
    const url = route.request().url()
    const to = url.startsWith('blob:') || url.startsWith('data:') ? origin : new URL(url).origin
    if (to === origin || o.alsoAllow?.includes(to)) return route.continue()
    // Another site's page (the provider's) is not ours to judge: what it asks elsewhere is only refused.
    if (!onOurPage(route.request().frame().url())) return route.abort('blockedbyclient')
    problems.push(`request to another origin: ${url}`)
    return route.abort('blockedbyclient')
  })
  const page = await context.newPage()
  page.on('console', (m) => {
    if (m.type() !== 'error' || !onOurPage(page.url())) return
    const text = m.text()
    const status = /status of (\d{3})/.exec(text)?.[1]
    if (status && allowed.has(Number(status))) return
    if (offline && /ERR_CONNECTION_REFUSED|Failed to fetch|ERR_EMPTY_RESPONSE/.test(text)) return
    problems.push(`console error: ${text}`)
  })
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`))
  return {
    page,
    context,
    problems,
    allowStatus: (...s) => {
      for (const x of s) allowed.add(x)
    },
    allowOffline: () => {
      offline = true
    },
    async screenshot(name) {
      if (!SCREENSHOTS) return
      mkdirSync(SCREENSHOT_DIR, { recursive: true })
      await page.screenshot({ path: join(SCREENSHOT_DIR, `${name}.png`) })
    },
    async finish() {
      try {
        const stored = page.isClosed() ? [] : await page.evaluate(() => Object.keys(localStorage))
        expect(stored).toEqual([])
        expect(problems).toEqual([])
      } finally {
        await context.close()
      }
    },
  }
}

/** Signs in on the page's sign-in form (docs/api.md §11) and waits for the signed-in navigation. */
export async function signIn(page: Page, email: string, password: string) {
  await page.getByLabel('Email').fill(email)
  await page.getByLabel('Password').fill(password)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('button', { name: 'Sign out' }).waitFor()
}
