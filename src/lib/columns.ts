// Columns of numbers that grow without copying (docs/api.md §6 "Execution order" keeps a million
// lines' keys in them; validation, every request line's offset).

/** Elements a column chunk holds (a power of two). */
export const CHUNK_BITS = 14
const CHUNK = 1 << CHUNK_BITS
export const IN_CHUNK = CHUNK - 1

/**
 * A column of numbers kept in chunks of CHUNK elements: appending never copies what it holds (a
 * doubling array would hold the old and the new copy at once, 1.5× its size, at its last growth).
 * Hot loops read `chunks` directly; one class per element type keeps each access of one kind.
 */
export class Float64Column {
  readonly chunks: Float64Array[] = []
  length = 0

  push(v: number) {
    const c = this.length >>> CHUNK_BITS
    if (c === this.chunks.length) this.chunks.push(new Float64Array(CHUNK))
    this.chunks[c]![this.length++ & IN_CHUNK] = v
  }

  at(i: number): number {
    return this.chunks[i >>> CHUNK_BITS]![i & IN_CHUNK]!
  }

  get bytes() {
    return this.chunks.length * CHUNK * 8
  }
}

export class Uint32Column {
  readonly chunks: Uint32Array[] = []
  length = 0

  push(v: number) {
    const c = this.length >>> CHUNK_BITS
    if (c === this.chunks.length) this.chunks.push(new Uint32Array(CHUNK))
    this.chunks[c]![this.length++ & IN_CHUNK] = v
  }

  at(i: number): number {
    return this.chunks[i >>> CHUNK_BITS]![i & IN_CHUNK]!
  }

  /** Its numbers in one array. */
  toArray(): Uint32Array {
    const out = new Uint32Array(this.length)
    for (let c = 0; c < this.chunks.length; c++) {
      const from = c * CHUNK
      out.set(this.chunks[c]!.subarray(0, Math.min(CHUNK, this.length - from)), from)
    }
    return out
  }

  get bytes() {
    return this.chunks.length * CHUNK * 4
  }
}

export class Uint8Column {
  readonly chunks: Uint8Array[] = []
  length = 0

  push(v: number) {
    const c = this.length >>> CHUNK_BITS
    if (c === this.chunks.length) this.chunks.push(new Uint8Array(CHUNK))
    this.chunks[c]![this.length++ & IN_CHUNK] = v
  }

  get bytes() {
    return this.chunks.length * CHUNK
  }
}

/** What reads a column of numbers by index: a column, a typed array or an array. */
export interface NumbersAt {
  readonly length: number
  at(i: number): number | undefined
}
