import type { ComponentChildren, InputHTMLAttributes } from 'preact'
import { useId, useState } from 'preact/hooks'
import { messageOf } from '../lib/api'
import type { Paged } from '../lib/hooks'

/** An error in words, announced to assistive technology. */
export function ErrorNote({ error }: { error: unknown }) {
  if (!error) return null
  return (
    <p role="alert" class="error">
      {messageOf(error)}
    </p>
  )
}

type InputProps = InputHTMLAttributes & {
  label: string
  /** The error that belongs to this control, shown next to it. */
  error?: string | null
}

export function Field({ label, error, ...input }: InputProps) {
  const id = useId()
  const hint = `${id}-error`
  return (
    <div class="field">
      <label for={id}>{label}</label>
      <input
        id={id}
        aria-invalid={error ? true : undefined}
        aria-describedby={error ? hint : undefined}
        {...input}
      />
      {error ? (
        <p id={hint} class="error" role="alert">
          {error}
        </p>
      ) : null}
    </div>
  )
}

/** Status of a list: loading, its error, or nothing. Never a spinner after an answer. */
export function ListState({
  res,
  empty,
}: {
  res: { loading: boolean; error: unknown; data?: { data: unknown[] } }
  empty: string
}) {
  if (res.error) return <ErrorNote error={res.error} />
  if (!res.data) return res.loading ? <p class="muted">Loading…</p> : null
  if (res.data.data.length === 0) return <p class="muted">{empty}</p>
  return null
}

export function Pager({ list, label }: { list: Paged<unknown>; label: string }) {
  if (!list.next && !list.previous) return null
  return (
    <nav class="pager" aria-label={`${label} pages`}>
      <button type="button" disabled={!list.previous} onClick={() => list.previous?.()}>
        Previous page
      </button>
      <span>Page {list.page}</span>
      <button type="button" disabled={!list.next} onClick={() => list.next?.()}>
        Next page
      </button>
    </nav>
  )
}

export function Status({ value }: { value: string }) {
  return <span class={`status status-${value}`}>{value.replaceAll('_', ' ')}</span>
}

export function Section({
  title,
  children,
  actions,
}: {
  title: string
  children: ComponentChildren
  actions?: ComponentChildren
}) {
  return (
    <section aria-label={title}>
      <header class="section-head">
        <h2>{title}</h2>
        {actions}
      </header>
      {children}
    </section>
  )
}

/**
 * A destructive action asked twice (docs/api.md §11): the button named `name`, then `question` with
 * `confirm` and "Cancel"; a refusal's error is shown beside the control, the question closed.
 */
export function ConfirmAction({
  label,
  name,
  question,
  confirm,
  run,
}: {
  /** The button's words ("Remove"). */
  label: string
  /** Its accessible name, naming what it acts on ("Remove worker gpu-1"). */
  name: string
  question: string
  /** The confirming button's words ("Confirm removal"). */
  confirm: string
  /** The action; it resolves once done (the caller reloads or moves on). */
  run: () => Promise<unknown>
}) {
  const [asking, setAsking] = useState(false)
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<unknown>(null)
  const go = async () => {
    setBusy(true)
    try {
      await run()
      setAsking(false)
    } catch (err) {
      setError(err)
      setAsking(false)
    } finally {
      setBusy(false)
    }
  }
  return (
    <div class="confirm-action">
      {asking ? (
        <fieldset aria-label={name} class="confirm">
          <span>{question}</span>{' '}
          <button type="button" class="danger" disabled={busy} onClick={go}>
            {confirm}
          </button>{' '}
          <button type="button" disabled={busy} onClick={() => setAsking(false)}>
            Cancel
          </button>
        </fieldset>
      ) : (
        <button
          type="button"
          aria-label={name}
          onClick={() => {
            setError(null)
            setAsking(true)
          }}
        >
          {label}
        </button>
      )}
      <ErrorNote error={error} />
    </div>
  )
}
