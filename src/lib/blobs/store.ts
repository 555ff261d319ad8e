import { randomBase62 } from '../ids'

// Where file bytes live (docs/api.md §5, §12): uploads, output and error files, and the scratch copy of
// a result upload whose fields came after its file. One interface, named after what gridkeep does
// with the bytes, and two engines: local disk (the default, DATA_DIR/files/<key>) and S3 through
// Bun's built-in client. The rules (who may read, when a file is published) live above it.

/** A blob being written. Nothing is readable under its key until publish() resolves. */
export interface BlobWriter {
  /** Appends bytes; resolves when the engine can take more (backpressure). */
  write(chunk: Uint8Array): Promise<void>
  /** Completes the blob and makes it readable under its key. Resolves with its size in bytes. */
  publish(): Promise<number>
  /** Gives the blob up: whatever was written (or published) is removed. Never throws. */
  abort(): Promise<void>
}

export interface BlobStore {
  readonly engine: 'local' | 's3'
  /** Starts writing `key` (staged: see BlobWriter). */
  create(key: string): BlobWriter
  /** The bytes of `key`, streamed; null when there is no such blob. */
  read(key: string): Promise<ReadableStream<Uint8Array> | null>
  /**
   * Bytes [start, end) of `key` (end null: to the end), streamed — one range read, also on S3
   * (docs/api.md §16: a shard's lines); null when there is no such blob.
   */
  readRange(key: string, start: number, end: number | null): Promise<ReadableStream<Uint8Array> | null>
  /**
   * A body for an HTTP response (the local engine hands Bun the file, so it is sent without
   * copying through JavaScript); null when there is no such blob.
   */
  body(key: string): Promise<Blob | ReadableStream<Uint8Array> | null>
  /** Size in bytes, or null when there is no such blob. */
  size(key: string): Promise<number | null>
  /** Removes `key`, and whatever a writer of it that died left; a missing blob is not an error. */
  remove(key: string): Promise<void>
  /** Every published key starting with `prefix`, in no particular order. */
  list(prefix: string): AsyncGenerator<string>
  /** The local path of `key` when the engine keeps blobs on this machine's disk (random reads). */
  localPath(key: string): string | null
  /**
   * Start-up: checks that the store can be written and deleted, and removes what a crash left
   * half-written (docs/api.md: `.part` files, scratch blobs). Returns how many leftovers went.
   */
  prepare(): Promise<number>
}

/** Keys of scratch blobs: never a file, removed by prepare(). */
export const SCRATCH_PREFIX = 'tmp/'

/**
 * A fresh scratch key. Random from its first character, so a listing of tmp/ that has to be
 * split (S3 engine, more than one page) splits evenly on the first character after the prefix.
 */
export const scratchKey = () => SCRATCH_PREFIX + randomBase62(22)

// A key is a file id (`file-…`) or a scratch name under tmp/: no other shape reaches a path or
// an object name, whatever a request carries.
const KEY = /^(tmp\/)?[0-9A-Za-z][0-9A-Za-z_-]{0,127}$/

export function checkKey(key: string): string {
  if (!KEY.test(key)) throw new Error(`not a blob key: ${JSON.stringify(key.slice(0, 80))}`)
  return key
}

/** Raised by prepare() when the store is unusable: one line naming STORAGE_URL, no secret. */
export class BlobStoreUnavailableError extends Error {}
