import { X509Certificate } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { connect } from 'node:tls'

// Certificates made with openssl, as a lab's own CA would make them (docs/deployment.md "TLS on
// the binary"): a root CA the clients trust, an intermediate CA, and server certificates it signs
// for localhost and 127.0.0.1, written as the chain a server serves (leaf, then intermediate).
// EC P-256 keys: made in milliseconds.

function openssl(args: string[], cwd: string) {
  const r = Bun.spawnSync(['openssl', ...args], { cwd, stdout: 'pipe', stderr: 'pipe' })
  if (r.exitCode !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr.toString()}`)
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes']

export interface LabCa {
  dir: string
  /** The root's certificate: what clients are given (--ca-file, NODE_EXTRA_CA_CERTS). */
  rootFile: string
  /** Issues a server certificate: `<name>.fullchain.pem` (leaf + intermediate) and `<name>.key.pem`. */
  issue(name: string): ServerCert
}

export interface ServerCert {
  certFile: string
  keyFile: string
  /** The leaf's SHA-256 fingerprint, as a TLS client sees it. */
  fingerprint: string
}

export function makeLabCa(dir: string): LabCa {
  openssl(
    [
      'req',
      '-x509',
      ...EC,
      '-keyout',
      'root.key',
      '-out',
      'root.pem',
      '-days',
      '2',
      '-subj',
      '/CN=Test Lab Root CA',
    ],
    dir,
  )
  writeFileSync(
    join(dir, 'ca.ext'),
    'basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n',
  )
  openssl(
    ['req', ...EC, '-keyout', 'inter.key', '-out', 'inter.csr', '-subj', '/CN=Test Lab Intermediate CA'],
    dir,
  )
  openssl(
    [
      'x509',
      '-req',
      '-in',
      'inter.csr',
      '-CA',
      'root.pem',
      '-CAkey',
      'root.key',
      '-CAcreateserial',
      '-out',
      'inter.pem',
      '-days',
      '2',
      '-extfile',
      'ca.ext',
    ],
    dir,
  )
  writeFileSync(
    join(dir, 'leaf.ext'),
    'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n',
  )
  return {
    dir,
    rootFile: join(dir, 'root.pem'),
    issue(name) {
      openssl(
        ['req', ...EC, '-keyout', `${name}.key.pem`, '-out', `${name}.csr`, '-subj', `/CN=${name}`],
        dir,
      )
      openssl(
        [
          'x509',
          '-req',
          '-in',
          `${name}.csr`,
          '-CA',
          'inter.pem',
          '-CAkey',
          'inter.key',
          '-CAcreateserial',
          '-out',
          `${name}.pem`,
          '-days',
          '1',
          '-extfile',
          'leaf.ext',
        ],
        dir,
      )
      const leaf = readFileSync(join(dir, `${name}.pem`), 'utf8')
      writeFileSync(join(dir, `${name}.fullchain.pem`), leaf + readFileSync(join(dir, 'inter.pem'), 'utf8'))
      return {
        certFile: join(dir, `${name}.fullchain.pem`),
        keyFile: join(dir, `${name}.key.pem`),
        fingerprint: new X509Certificate(leaf).fingerprint256,
      }
    },
  }
}

/** The fingerprint of the certificate a new connection to `port` is served, verified against `ca`. */
export function servedFingerprint(port: number, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, servername: 'localhost', ca }, () => {
      resolve(socket.getPeerCertificate().fingerprint256)
      socket.end()
    })
    socket.on('error', reject)
  })
}
