import { Interrupted } from './api'
import { usageError } from './exit'

// Questions `gridkeep login` asks. On a terminal: the question on stderr, the answer typed on the
// same line, a password not echoed (raw mode; Ctrl-C still stops). Otherwise (a pipe, a script, a
// CI job): the same questions, each answered by the next line of stdin, so
// `printf '%s\n' "$EMAIL" "$PASSWORD" | gridkeep login` works without a terminal.

export interface Prompter {
  /** True on a terminal: a person answers, so a new password is asked twice. */
  readonly terminal: boolean
  ask(question: string, o?: { secret?: boolean }): Promise<string>
}

type Write = (text: string) => void

/**
 * `lines`: answers are stdin's lines and no question is written, even on a terminal
 * (`--password-stdin`).
 */
export function stdinPrompter(write: Write, interrupt: AbortSignal, o: { lines?: boolean } = {}): Prompter {
  if (process.stdin.isTTY && !o.lines) {
    return { terminal: true, ask: (question, o = {}) => askTerminal(question, !!o.secret, write) }
  }
  const lines = new LineReader(interrupt)
  const say = o.lines ? () => {} : write
  return {
    terminal: false,
    async ask(question) {
      say(question)
      const line = await lines.next()
      say('\n')
      if (line === null) throw usageError(`stdin ended before the answer to '${question.trim()}'`)
      return line
    },
  }
}

/** One line typed on the terminal, in raw mode so that a secret is not echoed. */
function askTerminal(question: string, secret: boolean, write: Write): Promise<string> {
  const stdin = process.stdin
  // Raw mode before the question shows: what is typed after seeing it is never echoed.
  stdin.setRawMode(true)
  stdin.resume()
  write(question)
  return new Promise((resolve, reject) => {
    let answer = ''
    let inEscape = false
    const finish = (outcome: () => void) => {
      stdin.off('data', onData)
      stdin.setRawMode(false)
      stdin.pause()
      write('\n')
      outcome()
    }
    const onData = (chunk: Buffer | string) => {
      for (const ch of chunk.toString()) {
        if (inEscape) {
          // An arrow or function key: ESC [ … final letter; none of it is part of the answer.
          if (/[A-Za-z~]/.test(ch)) inEscape = false
          continue
        }
        if (ch === '\r' || ch === '\n') return finish(() => resolve(answer))
        if (ch === '\u0003') return finish(() => reject(new Interrupted()))
        if (ch === '\u0004' && answer === '')
          return finish(() => reject(usageError(`no answer to '${question.trim()}'`)))
        if (ch === '\u001b') inEscape = true
        else if (ch === '\u007f' || ch === '\b') {
          if (answer) {
            answer = [...answer].slice(0, -1).join('')
            if (!secret) write('\b \b')
          }
        } else if (ch >= ' ') {
          answer += ch
          if (!secret) write(ch)
        }
      }
    }
    stdin.on('data', onData)
  })
}

const stdinReader = () => Bun.stdin.stream().getReader()

/** The lines of stdin, one per call; null once it has ended. */
class LineReader {
  private buffer = ''
  private ended = false
  private reader: ReturnType<typeof stdinReader> | null = null
  private readonly decoder = new TextDecoder()

  constructor(private readonly interrupt: AbortSignal) {}

  async next(): Promise<string | null> {
    for (;;) {
      const nl = this.buffer.indexOf('\n')
      if (nl >= 0) {
        const line = this.buffer.slice(0, nl).replace(/\r$/, '')
        this.buffer = this.buffer.slice(nl + 1)
        return line
      }
      if (this.ended) {
        const last = this.buffer
        this.buffer = ''
        return last === '' ? null : last
      }
      this.reader ??= stdinReader()
      const { value, done } = await this.read(this.reader)
      if (done) this.ended = true
      else this.buffer += this.decoder.decode(value, { stream: true })
    }
  }

  private read(reader: ReturnType<typeof stdinReader>) {
    if (this.interrupt.aborted) return Promise.reject(new Interrupted())
    return new Promise<Awaited<ReturnType<typeof reader.read>>>((resolve, reject) => {
      const stop = () => reject(new Interrupted())
      this.interrupt.addEventListener('abort', stop, { once: true })
      reader.read().then(
        (r) => {
          this.interrupt.removeEventListener('abort', stop)
          resolve(r)
        },
        (e) => {
          this.interrupt.removeEventListener('abort', stop)
          reject(e)
        },
      )
    })
  }
}
