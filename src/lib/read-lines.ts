// Line reading over a byte stream without holding more than one line in memory, bounded by
// `maxLineBytes`: upload-results reads the worker's output once and the batch input twice (ids,
// then missing results); the daemon reads job inputs and Ollama's streamed pull progress.
// (The batch validator has its own splitter in lines.ts: it must drop an over-long line and go on
// counting, and remember byte offsets, where these readers stop at the first over-long line.)

export class LineTooLongError extends Error {
  constructor(readonly line: number) {
    super(`line ${line} is too long`)
  }
}

export class InvalidUtf8Error extends Error {
  constructor(readonly line: number) {
    super(`line ${line} is not valid UTF-8`)
  }
}

/** Yields [lineNumber (1-based), text] for every line, with any trailing \r removed. */
export async function* readLines(
  source: AsyncIterable<Uint8Array>,
  maxLineBytes: number,
  opts: { fatal?: boolean } = {},
): AsyncGenerator<[number, string]> {
  const decoder = new TextDecoder('utf-8', { fatal: opts.fatal ?? false })
  let pending: Uint8Array[] = []
  let pendingBytes = 0
  let lineNo = 0
  const decode = (bytes: Uint8Array): string => {
    let end = bytes.length
    if (end > 0 && bytes[end - 1] === 13) end--
    try {
      return decoder.decode(bytes.subarray(0, end))
    } catch {
      throw new InvalidUtf8Error(lineNo)
    }
  }
  for await (const chunk of source) {
    let start = 0
    for (;;) {
      const nl = chunk.indexOf(10, start)
      if (nl === -1) break
      lineNo++
      const piece = chunk.subarray(start, nl)
      if (pendingBytes + piece.length > maxLineBytes) throw new LineTooLongError(lineNo)
      const whole = pendingBytes > 0 ? Buffer.concat([...pending, piece]) : piece
      pending = []
      pendingBytes = 0
      yield [lineNo, decode(whole)]
      start = nl + 1
    }
    if (start < chunk.length) {
      const rest = chunk.subarray(start)
      pendingBytes += rest.length
      if (pendingBytes > maxLineBytes) throw new LineTooLongError(lineNo + 1)
      // The source may reuse its buffer: keep a copy of the unfinished line.
      pending.push(Uint8Array.from(rest))
    }
  }
  if (pendingBytes > 0) {
    lineNo++
    yield [lineNo, decode(Buffer.concat(pending))]
  }
}
