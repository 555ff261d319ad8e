import { useState } from 'preact/hooks'
import { ErrorNote, ListState, Pager, Section } from '../components/ui'
import { client, download, ok } from '../lib/api'
import { formatBytes, formatTime } from '../lib/format'
import { usePaged, useResource } from '../lib/hooks'
import type { FileObject } from '../lib/types'

export function Files() {
  const list = usePaged((query, signal) => ok(client.v1.files.get({ query, fetch: { signal } })), 'files')
  const [error, setError] = useState<unknown>(null)
  const remove = async (f: FileObject) => {
    setError(null)
    try {
      await ok(client.v1.files({ file_id: f.id }).delete())
      list.reload()
    } catch (e) {
      setError(e)
    }
  }
  return (
    <Section title="Files">
      <ErrorNote error={error} />
      <ListState res={list} empty="No file yet. Upload one with “New batch” on the Batches page." />
      {list.data?.data.length ? (
        <table>
          <thead>
            <tr>
              <th>File</th>
              <th>Name</th>
              <th>Purpose</th>
              <th>Size</th>
              <th>Created</th>
              <th>
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {list.data.data.map((f) => (
              <tr key={f.id}>
                <td>
                  <code>{f.id}</code>
                </td>
                <td>{f.filename}</td>
                <td>{f.purpose}</td>
                <td>{formatBytes(f.bytes)}</td>
                <td>{formatTime(f.created_at)}</td>
                <td class="actions">
                  <button
                    type="button"
                    onClick={() => download(`/v1/files/${f.id}/content`, f.filename).catch(setError)}
                  >
                    Download
                  </button>
                  <button type="button" onClick={() => remove(f)}>
                    Delete
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
      <Pager list={list} label="Files" />
    </Section>
  )
}

export function Models() {
  const models = useResource((signal) => ok(client.v1.models.get({ fetch: { signal } })), 'models', 15_000)
  return (
    <Section title="Models">
      <p class="muted">The catalogue as you may select it: the id goes in each line's body.model.</p>
      <ListState res={models} empty="The catalogue has no model you may select." />
      {models.data?.data.length ? (
        <table>
          <thead>
            <tr>
              <th>Model</th>
              <th>Id</th>
              <th>Task</th>
              <th>Size</th>
              <th>Quantization</th>
              <th>VRAM</th>
              <th>Availability</th>
            </tr>
          </thead>
          <tbody>
            {models.data.data.map((m) => (
              <tr key={m.id}>
                <td>{m.display_name}</td>
                <td>
                  <code>{m.id}</code>
                </td>
                <td>{m.task_type}</td>
                <td>{m.parameter_size ?? '—'}</td>
                <td>{m.quantization ?? '—'}</td>
                <td>{m.vram_gb === null ? '—' : `${m.vram_gb} GB`}</td>
                <td>
                  <span class={m.available ? 'status status-online' : 'status status-offline'}>
                    {m.available ? 'available' : 'no worker now'}
                  </span>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : null}
    </Section>
  )
}
