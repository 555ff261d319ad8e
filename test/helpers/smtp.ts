import type { AddressInfo } from 'node:net'
import { SMTPServer } from 'smtp-server'

// A real receiving SMTP server for tests (issue 2: a real SMTP round trip).

export interface ReceivedMail {
  from: string
  to: string[]
  raw: string
  /** The text body with quoted-printable soft breaks and escapes decoded. */
  text: string
}

export async function startSmtpServer(auth?: { user: string; pass: string }) {
  const inbox: ReceivedMail[] = []
  const waiters: (() => void)[] = []
  const server = new SMTPServer({
    disabledCommands: ['STARTTLS'],
    allowInsecureAuth: true,
    authOptional: !auth,
    onAuth(a, _session, cb) {
      if (auth && a.username === auth.user && a.password === auth.pass) return cb(null, { user: a.username })
      cb(new Error('invalid credentials'))
    },
    onData(stream, session, cb) {
      const chunks: Buffer[] = []
      stream.on('data', (c: Buffer) => chunks.push(c))
      stream.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8')
        inbox.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          raw,
          text: decodeQuotedPrintable(raw),
        })
        for (const w of waiters.splice(0)) w()
        cb()
      })
    },
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.server.address() as AddressInfo).port
  return {
    port,
    inbox,
    url: auth ? `smtp://${auth.user}:${auth.pass}@127.0.0.1:${port}` : `smtp://127.0.0.1:${port}`,
    async waitForMail(count = 1, timeoutMs = 5000) {
      const deadline = Date.now() + timeoutMs
      while (inbox.length < count) {
        if (Date.now() > deadline) throw new Error(`no mail after ${timeoutMs} ms`)
        await new Promise<void>((r) => {
          waiters.push(r)
          setTimeout(r, 100)
        })
      }
      return inbox[count - 1]!
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  }
}

function decodeQuotedPrintable(raw: string) {
  return raw
    .replace(/=\r?\n/g, '')
    .replace(/=([0-9A-F]{2})/g, (_, h) => String.fromCharCode(Number.parseInt(h, 16)))
}
