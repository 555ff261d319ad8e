import { useEffect, useRef, useState } from 'preact/hooks'
import { ErrorNote, Field } from '../components/ui'
import { ApiError, anonymousClient, client, ok, poolCapacity, session } from '../lib/api'
import { formatCount } from '../lib/format'
import { useResource } from '../lib/hooks'
import { navigate } from '../lib/router'

// The signed-out pages of docs/api.md §11: sign in (with the pool's capacity and, when configured,
// "Sign in with <provider>"), the return from single sign-on, create account, forgot and reset
// password, and the forced first-login change.

/** Splits an API error: the one naming a control goes next to it, the rest at the top. */
function useErrors() {
  const [error, setError] = useState<unknown>(null)
  const paramError = (param: string) =>
    error instanceof ApiError && error.param === param ? error.message : null
  const topError = error instanceof ApiError && error.param ? null : error
  return { setError, paramError, topError }
}

async function signInWith(email: string, password: string) {
  const answer = await ok(anonymousClient.v1.auth.login.post({ email, password }))
  session.signIn(answer.access_token)
}

function PoolSummary() {
  const pool = useResource((signal) => poolCapacity(true, signal), 'pool', 5000)
  const p = pool.data
  return (
    <section aria-label="Pool capacity" class="pool">
      <h2>Pool</h2>
      {p ? (
        <>
          <dl class="figures">
            <div>
              <dt>Workers online</dt>
              <dd>{formatCount(p.workers_online)}</dd>
            </div>
            <div>
              <dt>Idle</dt>
              <dd>{formatCount(p.workers_idle)}</dd>
            </div>
            <div>
              <dt>Busy</dt>
              <dd>{formatCount(p.workers_busy)}</dd>
            </div>
          </dl>
          <h3>Models servable</h3>
          {p.models_servable.length ? (
            <ul>
              {p.models_servable.map((m) => (
                <li key={m.id}>
                  {m.display_name} <code>{m.id}</code>
                </li>
              ))}
            </ul>
          ) : (
            <p class="muted">No model can be served right now.</p>
          )}
        </>
      ) : pool.error ? (
        <ErrorNote error={pool.error} />
      ) : (
        <p class="muted">Loading…</p>
      )}
    </section>
  )
}

/** docs/api.md §2 "Single sign-on": the start is a navigation to the server, then the provider. */
function startSso(startUrl: string) {
  location.assign(`${startUrl}?${new URLSearchParams({ return_to: '/app/batches' })}`)
}

export function SignIn() {
  const methods = useResource(
    (signal) => ok(anonymousClient.v1.auth.methods.get({ fetch: { signal } })),
    'auth-methods',
  )
  const sso = methods.data?.sso ?? null
  // Until the server has said, the password form shows (the default, and a server without SSO).
  const passwordLogin = methods.data?.password ?? true
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const [busy, setBusy] = useState(false)
  const [ended] = useState(() => session.takeEndReason())
  const { setError, paramError, topError } = useErrors()
  const submit = async (e: Event) => {
    e.preventDefault()
    setBusy(true)
    setError(null)
    try {
      await signInWith(email, password)
    } catch (error) {
      setError(error)
    } finally {
      setBusy(false)
    }
  }
  return (
    <main class="signed-out">
      <h1>gridkeep</h1>
      <div class="columns">
        <form onSubmit={submit} aria-label="Sign in">
          <h2>Sign in</h2>
          {ended && !topError ? <p class="notice">{ended}</p> : null}
          <ErrorNote error={topError} />
          {sso ? (
            <p>
              <button type="button" class="sso" onClick={() => startSso(sso.start_url)}>
                Sign in with {sso.name}
              </button>
            </p>
          ) : null}
          {passwordLogin ? (
            <>
              <Field
                label="Email"
                type="email"
                autocomplete="username"
                required
                value={email}
                error={paramError('email')}
                onInput={(e) => setEmail(e.currentTarget.value)}
              />
              <Field
                label="Password"
                type="password"
                autocomplete="current-password"
                required
                value={password}
                error={paramError('password')}
                onInput={(e) => setPassword(e.currentTarget.value)}
              />
              <button type="submit" disabled={busy}>
                Sign in
              </button>
              <p>
                <a href="/app/signup">Create account</a> · <a href="/app/forgot-password">Forgot password?</a>
              </p>
            </>
          ) : null}
        </form>
        <PoolSummary />
      </div>
    </main>
  )
}

/**
 * `/app/sso#code=…&return_to=…`, where the server's callback sends the browser: the one-time code
 * is exchanged for the session (the browser's cookie proves it started the sign-in), then the page
 * asked for opens. The code leaves the address bar at once.
 */
export function SsoReturn() {
  const [error, setError] = useState<unknown>(null)
  const started = useRef(false)
  useEffect(() => {
    if (started.current) return
    started.current = true
    const params = new URLSearchParams(location.hash.slice(1))
    history.replaceState(null, '', location.pathname)
    const code = params.get('code')
    const back = params.get('return_to') ?? ''
    // Only a path of this server (docs/api.md §2): never another host.
    const to =
      back.startsWith('/') && !back.startsWith('//') && !back.startsWith('/\\') ? back : '/app/batches'
    if (!code) {
      setError(new Error('This page needs the sign-in code from the identity provider. Sign in again.'))
      return
    }
    ok(anonymousClient.v1.auth.oidc.token.post({ code }))
      .then((answer) => {
        session.signIn(answer.access_token)
        navigate(to, true)
      })
      .catch(setError)
  }, [])
  return (
    <main class="signed-out">
      <h1>gridkeep</h1>
      <section aria-label="Single sign-on">
        <h2>Signing in…</h2>
        <ErrorNote error={error} />
        {error ? (
          <p>
            <a href="/">Back to sign-in</a>
          </p>
        ) : (
          <p class="muted">Finishing the sign-in with your identity provider.</p>
        )}
      </section>
    </main>
  )
}

export function SignUp() {
  const [fullName, setFullName] = useState('')
  const [email, setEmail] = useState('')
  const [password, setPassword] = useState('')
  const [busy, setBusy] = useState(false)
  const { setError, paramError, topError } = useErrors()
  const submit = async (e: Event) => {
    e.preventDefault()
    setBusy(true)
    setError(null)
    try {
      await ok(anonymousClient.v1.auth.signup.post({ full_name: fullName, email, password }))
      await signInWith(email, password)
      navigate('/app/batches', true)
    } catch (error) {
      setError(error)
    } finally {
      setBusy(false)
    }
  }
  return (
    <main class="signed-out">
      <h1>gridkeep</h1>
      <form onSubmit={submit} aria-label="Create account">
        <h2>Create account</h2>
        <ErrorNote error={topError} />
        <Field
          label="Full name"
          autocomplete="name"
          required
          value={fullName}
          error={paramError('full_name')}
          onInput={(e) => setFullName(e.currentTarget.value)}
        />
        <Field
          label="Email"
          type="email"
          autocomplete="username"
          required
          value={email}
          error={paramError('email')}
          onInput={(e) => setEmail(e.currentTarget.value)}
        />
        <Field
          label="Password"
          type="password"
          autocomplete="new-password"
          required
          value={password}
          error={paramError('password')}
          onInput={(e) => setPassword(e.currentTarget.value)}
        />
        <button type="submit" disabled={busy}>
          Create account
        </button>
        <p>
          <a href="/">Sign in</a>
        </p>
      </form>
    </main>
  )
}

export function ForgotPassword() {
  const [email, setEmail] = useState('')
  const [busy, setBusy] = useState(false)
  const [sent, setSent] = useState(false)
  const { setError, paramError, topError } = useErrors()
  const submit = async (e: Event) => {
    e.preventDefault()
    setBusy(true)
    setError(null)
    try {
      await ok(anonymousClient.v1.auth['forgot-password'].post({ email }))
      setSent(true)
    } catch (error) {
      setError(error)
    } finally {
      setBusy(false)
    }
  }
  return (
    <main class="signed-out">
      <h1>gridkeep</h1>
      <form onSubmit={submit} aria-label="Forgot password">
        <h2>Forgot password</h2>
        <ErrorNote error={topError} />
        {sent ? (
          <p role="status" class="notice">
            If an account exists for {email}, a reset link is on its way. It works once, for a limited time.
          </p>
        ) : null}
        <Field
          label="Email"
          type="email"
          autocomplete="username"
          required
          value={email}
          error={paramError('email')}
          onInput={(e) => setEmail(e.currentTarget.value)}
        />
        <button type="submit" disabled={busy}>
          Send reset link
        </button>
        <p>
          <a href="/">Sign in</a>
        </p>
      </form>
    </main>
  )
}

export function ResetPassword({ token }: { token: string }) {
  const [password, setPassword] = useState('')
  const [busy, setBusy] = useState(false)
  const [done, setDone] = useState(false)
  const { setError, paramError, topError } = useErrors()
  const submit = async (e: Event) => {
    e.preventDefault()
    setBusy(true)
    setError(null)
    try {
      await ok(anonymousClient.v1.auth['reset-password'].post({ token, new_password: password }))
      setDone(true)
    } catch (error) {
      setError(error)
    } finally {
      setBusy(false)
    }
  }
  return (
    <main class="signed-out">
      <h1>gridkeep</h1>
      <form onSubmit={submit} aria-label="Reset password">
        <h2>Set a new password</h2>
        {token ? null : <p class="error">This page needs the link from the reset mail.</p>}
        <ErrorNote error={topError ?? (paramError('token') ? new Error(paramError('token')!) : null)} />
        {done ? (
          <p role="status" class="notice">
            Your password is set. <a href="/">Sign in</a> with it.
          </p>
        ) : (
          <>
            <Field
              label="New password"
              type="password"
              autocomplete="new-password"
              required
              value={password}
              error={paramError('new_password')}
              onInput={(e) => setPassword(e.currentTarget.value)}
            />
            <button type="submit" disabled={busy || !token}>
              Set password
            </button>
          </>
        )}
      </form>
    </main>
  )
}

/** docs/api.md §1: until the password is changed, nothing else is reachable. */
export function ChangePassword({ onChanged }: { onChanged: () => void }) {
  const [current, setCurrent] = useState('')
  const [next, setNext] = useState('')
  const [busy, setBusy] = useState(false)
  const { setError, paramError, topError } = useErrors()
  const submit = async (e: Event) => {
    e.preventDefault()
    setBusy(true)
    setError(null)
    try {
      const answer = await ok(
        client.v1.auth['change-password'].post({
          current_password: current,
          new_password: next,
        }),
      )
      session.signIn(answer.access_token)
      onChanged()
    } catch (error) {
      setError(error)
    } finally {
      setBusy(false)
    }
  }
  return (
    <main class="signed-out">
      <h1>gridkeep</h1>
      <form onSubmit={submit} aria-label="Change password">
        <h2>Choose a new password</h2>
        <p>This account must change its password before anything else.</p>
        <ErrorNote error={topError} />
        <Field
          label="Current password"
          type="password"
          autocomplete="current-password"
          required
          value={current}
          error={paramError('current_password')}
          onInput={(e) => setCurrent(e.currentTarget.value)}
        />
        <Field
          label="New password"
          type="password"
          autocomplete="new-password"
          required
          value={next}
          error={paramError('new_password')}
          onInput={(e) => setNext(e.currentTarget.value)}
        />
        <button type="submit" disabled={busy}>
          Change password
        </button>
        <button type="button" class="link" onClick={() => session.signOut()}>
          Sign out
        </button>
      </form>
    </main>
  )
}
