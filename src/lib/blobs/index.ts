import { join } from 'node:path'
import type { Config } from '../../config'
import { LocalBlobStore } from './local'
import { parseStorageUrl, S3BlobStore } from './s3'
import { type BlobStore, BlobStoreUnavailableError } from './store'

export * from './store'

/** The engine STORAGE_URL selects (docs/api.md §12): unset → DATA_DIR/files; s3://… → S3. */
export function createBlobStore(config: Config): BlobStore {
  if (config.STORAGE_URL === undefined) return new LocalBlobStore(join(config.DATA_DIR, 'files'))
  const target = parseStorageUrl(config.STORAGE_URL)
  if (!target) throw new BlobStoreUnavailableError('STORAGE_URL: expected s3://BUCKET[/PREFIX]')
  return new S3BlobStore({
    ...target,
    endpoint: config.S3_ENDPOINT,
    region: config.S3_REGION,
    accessKeyId: config.S3_ACCESS_KEY_ID,
    secretAccessKey: config.S3_SECRET_ACCESS_KEY,
  })
}
