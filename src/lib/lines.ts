// A streaming line splitter over bytes (docs/api.md §6 validation): memory stays bounded by the longest
// accepted line, whatever the file size. Lines end at LF; a CR before the LF is dropped (CRLF files
// are accepted); a UTF-8 BOM at the very start of the input is ignored. Lines made only of
// whitespace are counted but not handed on. A line longer than `maxLineBytes` is never buffered
// whole: once it passes the limit its bytes are dropped and it is handed on as `null`.

const LF = 10
const CR = 13

/** Space, tab, CR, VT, FF: the bytes a whitespace-only line may consist of. */
const isWs = (b: number) => b === 32 || b === 9 || b === CR || b === 11 || b === 12

/**
 * Called for every non-blank line. `line` is null when the line was over the limit (its bytes
 * are gone); otherwise it is only valid during the call. `offset` is the byte offset of the line
 * in the input (after a BOM) and `length` its length in bytes without the terminator.
 */
export type OnLine = (line: Uint8Array | null, lineNo: number, offset: number, length: number) => void

export class LineSplitter {
  /** Physical lines completed so far (1-based number of the last one). */
  lines = 0
  private position = 0 // input offset of the next byte fed
  private lineStart = 0
  private parts: Uint8Array[] = []
  private partBytes = 0 // bytes of the current line seen so far (kept or dropped)
  private overflow = false
  private overflowNonWs = false

  constructor(
    private readonly maxLineBytes: number,
    private readonly onLine: OnLine,
  ) {}

  /** Feeds the next chunk; calls onLine for every line it completes. */
  push(chunk: Uint8Array) {
    let start = 0
    for (;;) {
      const nl = chunk.indexOf(LF, start)
      if (nl < 0) break
      this.complete(chunk.subarray(start, nl))
      start = nl + 1
      this.lineStart = this.position + start
    }
    if (start < chunk.length) this.keep(chunk.subarray(start))
    this.position += chunk.length
  }

  /** Ends the input: a last line without a terminator still counts. */
  end() {
    if (this.partBytes > 0) this.complete(new Uint8Array(0))
  }

  private keep(piece: Uint8Array) {
    this.partBytes += piece.length
    if (this.overflow) {
      if (!this.overflowNonWs) this.overflowNonWs = hasNonWs(piece)
      return
    }
    // +1 leaves room for the CR of a CRLF terminator.
    if (this.partBytes > this.maxLineBytes + 1) {
      this.overflow = true
      this.overflowNonWs = this.parts.some(hasNonWs) || hasNonWs(piece)
      this.parts = []
      return
    }
    this.parts.push(piece)
  }

  private complete(tail: Uint8Array) {
    this.lines++
    const lineNo = this.lines
    let offset = this.lineStart
    let line: Uint8Array | null
    if (this.overflow) {
      const nonWs = this.overflowNonWs || hasNonWs(tail)
      this.resetParts()
      if (nonWs) this.onLine(null, lineNo, offset, 0)
      return
    }
    if (this.parts.length === 0) line = tail
    else {
      this.parts.push(tail)
      line = concat(this.parts, this.partBytes + tail.length)
      this.resetParts()
    }
    if (lineNo === 1 && line.length >= 3 && line[0] === 0xef && line[1] === 0xbb && line[2] === 0xbf) {
      line = line.subarray(3)
      offset += 3
    }
    if (line.length > 0 && line[line.length - 1] === CR) line = line.subarray(0, line.length - 1)
    if (!hasNonWs(line)) return
    if (line.length > this.maxLineBytes) this.onLine(null, lineNo, offset, 0)
    else this.onLine(line, lineNo, offset, line.length)
  }

  private resetParts() {
    this.parts = []
    this.partBytes = 0
    this.overflow = false
    this.overflowNonWs = false
  }
}

function hasNonWs(bytes: Uint8Array): boolean {
  for (let i = 0; i < bytes.length; i++) if (!isWs(bytes[i]!)) return true
  return false
}

function concat(parts: Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total)
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}
