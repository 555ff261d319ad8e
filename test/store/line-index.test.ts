import { describe, expect, test } from 'bun:test'
import { lineIndexRow, lineSpansFrom, packLineSpans, SPAN_BYTES } from '../../src/store/batches'

// docs/api.md §6 "Execution order": the spans both engines store, and read back a shard's run of.

describe('batch_line_index spans', () => {
  // Request lines starting past 4 GiB (a start is a float64), the last one ending at the input's end.
  const B = 5_000_000_000
  const offsets = [B, B + 120, B + 400, B + 700, B + 1_400]
  const order = { order: Uint32Array.from([3, 0, 4, 2, 1]), bytes: B + 1_470 }

  test('each line in execution order: its start and its length up to the next line', () => {
    const spans = packLineSpans(offsets, order)
    expect(spans.byteLength).toBe(5 * SPAN_BYTES)
    const view = new DataView(spans.buffer, spans.byteOffset, spans.byteLength)
    const read = [...order.order].map((_, k) => [
      view.getFloat64(k * SPAN_BYTES, true),
      view.getUint32(k * SPAN_BYTES + 8, true),
    ])
    expect(read).toEqual([
      [B + 700, 700],
      [B, 120],
      [B + 1_400, 70],
      [B + 400, 300],
      [B + 120, 280],
    ])
    // A run of them reads back as byte ranges.
    expect(lineSpansFrom({ a: null, b: null, spans: spans.subarray(SPAN_BYTES, 3 * SPAN_BYTES) })).toEqual({
      ranges: [
        { start: B, end: B + 120 },
        { start: B + 1_400, end: B + 1_470 },
      ],
      lines: true,
    })
  })

  test('an ordered batch stores its spans and no offsets; a file-order one its offsets', () => {
    const result = {
      passed: true,
      model: 'm',
      needs: [],
      request_lines: 5,
      errors_total: 0,
      errors: [],
      line_offsets: offsets,
    }
    const ordered = lineIndexRow('b1', { ...result, line_order: order })!
    expect(ordered.offsets.byteLength).toBe(0)
    expect(ordered.spans!.byteLength).toBe(5 * SPAN_BYTES)
    const plain = lineIndexRow('b2', result)!
    expect(plain.offsets.byteLength).toBe(5 * 8)
    expect(plain.spans).toBeNull()
  })
})
