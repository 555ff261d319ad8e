import { createPrivateKey, X509Certificate } from 'node:crypto'
import { readFileSync, statSync } from 'node:fs'

// The server's certificate and key on disk (docs/deployment.md "TLS on the binary"): read and
// checked as a pair, and watched for a renewal. A renewal is two file writes (certbot, an ACME
// client, a Kubernetes secret remount), and between them the pair on disk does not match: a pair
// that does not check out is never served, the one served before stays, and the next change of
// either file is tried again.

export interface TlsPair {
  cert: string
  key: string
  /** The leaf's subject and expiry, for the log. */
  subject: string
  notAfter: string
}

export class TlsFilesError extends Error {}

/** Reads and checks the pair; throws TlsFilesError with one line naming the culprit's variable. */
export function readTlsPair(certFile: string, keyFile: string): TlsPair {
  const cert = readPem('TLS_CERT_FILE', certFile)
  const key = readPem('TLS_KEY_FILE', keyFile)
  let leaf: X509Certificate
  try {
    leaf = new X509Certificate(cert)
  } catch (e) {
    throw new TlsFilesError(`TLS_CERT_FILE: ${certFile} holds no PEM certificate (${(e as Error).message})`)
  }
  let privateKey: ReturnType<typeof createPrivateKey>
  try {
    privateKey = createPrivateKey(key)
  } catch (e) {
    throw new TlsFilesError(
      `TLS_KEY_FILE: ${keyFile} holds no unencrypted PEM private key (${(e as Error).message})`,
    )
  }
  if (!leaf.checkPrivateKey(privateKey))
    throw new TlsFilesError(`TLS_KEY_FILE: ${keyFile} is not the key of the certificate in ${certFile}`)
  return { cert, key, subject: leaf.subject.replaceAll('\n', ', '), notAfter: leaf.validTo }
}

function readPem(variable: string, path: string): string {
  try {
    return readFileSync(path, 'utf8')
  } catch (e) {
    throw new TlsFilesError(`${variable}: cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? e})`)
  }
}

/**
 * What identifies the files' contents without reading them: each one's inode, size and mtime,
 * through symlinks (certbot's live/ links point at a new archive/ file on renewal).
 */
export function tlsFilesStamp(certFile: string, keyFile: string): string {
  return [certFile, keyFile]
    .map((path) => {
      try {
        const s = statSync(path)
        return `${s.ino}:${s.size}:${s.mtimeMs}`
      } catch {
        return 'missing'
      }
    })
    .join('|')
}

export interface TlsWatch {
  certFile: string
  keyFile: string
  everyMs: number
  /** A changed pair that checks out: serve it. */
  renewed(pair: TlsPair): void
  /** A changed pair that does not (yet): the one served stays. */
  refused(why: string): void
}

/**
 * Looks at the files every `everyMs` and calls `renewed` once per change to a pair that checks
 * out. Returns stop(). `check()` is one look (what the interval runs).
 */
export function watchTlsFiles(w: TlsWatch): { check(): void; stop(): void } {
  let seen = tlsFilesStamp(w.certFile, w.keyFile)
  const check = () => {
    const now = tlsFilesStamp(w.certFile, w.keyFile)
    if (now === seen) return
    seen = now
    let pair: TlsPair
    try {
      pair = readTlsPair(w.certFile, w.keyFile)
    } catch (e) {
      w.refused((e as Error).message)
      return
    }
    w.renewed(pair)
  }
  const timer = setInterval(check, w.everyMs)
  timer.unref?.()
  return { check, stop: () => clearInterval(timer) }
}
