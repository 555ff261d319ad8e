import { dlopen, FFIType } from 'bun:ffi'
import { LIBCS } from './flock'

// docs/worker.md "What an engine sees": the daemon makes itself non-dumpable with
// prctl(PR_SET_DUMPABLE, 0) (prctl(2)). A process of the same user — an engine running a model
// repository's code — then cannot read the daemon's /proc/<pid>/environ or /proc/<pid>/mem, nor
// ptrace it (proc(5): its /proc files belong to root), and no core dump holds the worker key.
// Linux only: elsewhere it does nothing and says so. libc's prctl through bun:ffi, as flock.ts.

const PR_GET_DUMPABLE = 3
const PR_SET_DUMPABLE = 4

type Prctl = (option: number, a2: number, a3: number, a4: number, a5: number) => number

let prctl: Prctl | null | undefined

function load(): Prctl | null {
  if (prctl !== undefined) return prctl
  prctl = null
  if (process.platform !== 'linux') return prctl
  for (const { path } of LIBCS) {
    try {
      const lib = dlopen(path, {
        prctl: {
          args: [FFIType.i32, FFIType.u64, FFIType.u64, FFIType.u64, FFIType.u64],
          returns: FFIType.i32,
        },
      })
      const fn = lib.symbols.prctl as unknown as Prctl
      prctl = fn
      break
    } catch {}
  }
  return prctl
}

/** Makes this process non-dumpable; false when the system cannot (not Linux, no libc found). */
export function forbidDumps(): boolean {
  const p = load()
  return p !== null && p(PR_SET_DUMPABLE, 0, 0, 0, 0) === 0
}

/** Whether this process is dumpable now; null where that cannot be asked. */
export function dumpable(): boolean | null {
  const p = load()
  if (!p) return null
  const v = p(PR_GET_DUMPABLE, 0, 0, 0, 0)
  return v < 0 ? null : v !== 0
}
