import { render } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import { ErrorNote } from './components/ui'
import { client, ok, session } from './lib/api'
import { useResource } from './lib/hooks'
import { navigate, onLinkClick, useLocation } from './lib/router'
import type { Me } from './lib/types'
import { Admin } from './pages/admin'
import { Audit, readsAudit } from './pages/audit'
import { ChangePassword, ForgotPassword, ResetPassword, SignIn, SignUp, SsoReturn } from './pages/auth'
import { BatchDetail, Batches } from './pages/batches'
import { Files, Models } from './pages/catalogue'
import { Keys } from './pages/keys'
import { OrgDetail, Orgs } from './pages/orgs'
import { Usage } from './pages/usage'
import { Workers } from './pages/workers'

// The dashboard (docs/api.md §11): a client of the public JSON API, one page per path under /app/.

function useSession(): string | null {
  const [token, setToken] = useState(session.token)
  useEffect(() => session.subscribe(() => setToken(session.token)), [])
  return token
}

function App() {
  const url = useLocation()
  const token = useSession()
  const path = url.pathname
  if (path === '/reset-password') return <ResetPassword token={url.searchParams.get('token') ?? ''} />
  // docs/api.md §2 "Single sign-on": signed in or not, a return from the provider is exchanged first.
  if (path === '/app/sso') return <SsoReturn />
  if (!token) {
    if (path === '/app/signup') return <SignUp />
    if (path === '/app/forgot-password') return <ForgotPassword />
    return <SignIn />
  }
  return <SignedIn path={path} token={token} />
}

const NAV = [
  ['Batches', '/app/batches'],
  ['Files', '/app/files'],
  ['Models', '/app/models'],
  ['Workers', '/app/workers'],
  ['Keys', '/app/keys'],
  ['Organizations', '/app/orgs'],
  ['Usage', '/app/usage'],
] as const

function SignedIn({ path, token }: { path: string; token: string }) {
  const me = useResource((signal) => ok(client.v1.auth.me.get({ fetch: { signal } })), token)
  useEffect(() => {
    if (
      path === '/' ||
      path === '/app' ||
      path === '/app/' ||
      path === '/app/signup' ||
      path === '/app/forgot-password'
    )
      navigate('/app/batches', true)
  }, [path])
  if (!me.data)
    return (
      <main class="signed-out">
        {me.error ? (
          <>
            <ErrorNote error={me.error} />
            <button type="button" onClick={me.reload}>
              Try again
            </button>{' '}
            <button type="button" onClick={() => session.signOut()}>
              Sign out
            </button>
          </>
        ) : (
          <p class="muted">Loading…</p>
        )}
      </main>
    )
  if (me.data.must_change_password) return <ChangePassword onChanged={me.reload} />
  const superadmin = me.data.platform_role === 'superadmin'
  // docs/api.md §11, §17: the audit log for everyone who may read an entry.
  const links = [
    ...NAV,
    ...(readsAudit(me.data) ? [['Audit', '/app/audit'] as const] : []),
    ...(superadmin ? [['Admin', '/app/admin'] as const] : []),
  ]
  return (
    <>
      <header class="top">
        <a class="brand" href="/app/batches">
          gridkeep
        </a>
        <nav aria-label="Main">
          {links.map(([label, href]) => (
            <a key={href} href={href} aria-current={path.startsWith(href) ? 'page' : undefined}>
              {label}
            </a>
          ))}
        </nav>
        <span class="who">{me.data.email}</span>
        <button type="button" onClick={() => session.signOut()}>
          Sign out
        </button>
      </header>
      <main>
        <Page path={path} me={me.data} />
      </main>
    </>
  )
}

function Page({ path, me }: { path: string; me: Me }) {
  const superadmin = me.platform_role === 'superadmin'
  const [, section, id] = path.replace(/^\/app\/?/, '/').split('/')
  switch (section) {
    case 'batches':
      return id ? <BatchDetail id={id} /> : <Batches />
    case 'files':
      return <Files />
    case 'models':
      return <Models />
    case 'workers':
      return <Workers />
    case 'keys':
      return <Keys />
    case 'orgs':
      return id ? <OrgDetail id={id} /> : <Orgs />
    case 'usage':
      return <Usage me={me} />
    case 'audit':
      if (readsAudit(me)) return <Audit me={me} />
      break
    case 'admin':
      if (superadmin) return <Admin />
      break
    case '':
    case undefined:
      return <p class="muted">Loading…</p>
  }
  return <p class="error">No such page. Pick one from the menu.</p>
}

document.addEventListener('click', onLinkClick)
render(<App />, document.getElementById('root')!)
