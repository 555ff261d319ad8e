// Line-by-line reading of a byte stream without holding the whole file: a 50,000-line batch is read
// one chunk at a time and each line handed on as it completes.

/** Yields the lines of `stream` (without their terminator; a final unterminated line included). */
export async function* readLines(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder()
  let rest = ''
  for await (const chunk of stream) {
    const text = rest + decoder.decode(chunk, { stream: true })
    let start = 0
    let nl = text.indexOf('\n', start)
    while (nl !== -1) {
      yield trimCr(text.slice(start, nl))
      start = nl + 1
      nl = text.indexOf('\n', start)
    }
    rest = text.slice(start)
  }
  rest += decoder.decode()
  if (rest.length) yield trimCr(rest)
}

const trimCr = (s: string) => (s.endsWith('\r') ? s.slice(0, -1) : s)
