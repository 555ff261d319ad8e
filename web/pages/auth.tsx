import { useState } from 'preact/hooks'
import { ErrorNote, Field } from '../components/ui'
import { ApiError, anonymousClient, client, ok, poolCapacity, session } from '../lib/api'
import { formatCount } from '../lib/format'
import { useResource } from '../lib/hooks'
import { navigate } from '../lib/router'

// The signed-out pages of docs/api.md §11: sign in (with the pool's capacity), create account, forgot
// and reset password, and the forced first-login change.

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

export function SignIn() {
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
        </form>
        <PoolSummary />
      </div>
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
