import { expect, test } from 'bun:test'
import type { BlobWriter } from '../../src/lib/blobs'
import { AppError } from '../../src/lib/errors'
import { receiveUpload, safeFilename } from '../../src/modules/files/upload'
import { uploadForm } from '../helpers/batches'

// receiveUpload on its own: failures of the storage side end the upload instead of hanging it.

test('a file that cannot be written ends the upload with upload_failed', async () => {
  const req = new Request('http://x/', { method: 'POST', body: uploadForm('x'.repeat(2_000_000)) })
  let writes = 0
  const broken: BlobWriter = {
    write: async () => {
      writes++
      throw new Error('disk full')
    },
    publish: async () => 0,
    abort: async () => {},
  }
  const err = await receiveUpload(
    { contentType: req.headers.get('content-type'), contentLength: null, body: req.body },
    { maxBytes: 10_000_000, writer: broken },
  ).catch((e) => e)
  expect(writes).toBe(1)
  expect(err).toBeInstanceOf(AppError)
  expect(err.errorCode).toBe('upload_failed')
})

test('safeFilename keeps a harmless base name', () => {
  expect(safeFilename('../../etc/passwd.jsonl')).toBe('passwd.jsonl')
  expect(safeFilename('C:\\Users\\me\\batch.jsonl')).toBe('batch.jsonl')
  expect(safeFilename('a\u0000b\nc.jsonl')).toBe('abc.jsonl')
  expect(safeFilename(undefined)).toBe('')
  expect(safeFilename(`${'x'.repeat(300)}.jsonl`)).toHaveLength(255)
  expect(safeFilename(`${'x'.repeat(300)}.jsonl`).endsWith('.jsonl')).toBe(true)
})
