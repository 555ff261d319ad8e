import { dlopen, FFIType, read } from 'bun:ffi'
import { closeSync, constants, ftruncateSync, openSync, readFileSync, writeSync } from 'node:fs'

// A lock held for the life of this process: flock(2) on an open file (docs/worker.md "One daemon per
// state directory"). The kernel releases it when the process ends, however it ends (SIGKILL, a
// crash, a reboot), so a stale lock never blocks a start, and two processes racing for it cannot
// both win. Bun has no flock binding: libc's is called through bun:ffi, which is part of the Bun
// runtime and so of the compiled binary (no helper program to install, and nothing that outlives
// the daemon holding the lock for it, as a `flock(1)` child could). The file is opened close-on-exec,
// so the engines the daemon starts never inherit the lock.

const LOCK_EX = 2
const LOCK_NB = 4

/** Where libc is on Linux (glibc, musl) and macOS, and how each names errno's address. */
export const LIBCS = [
  { path: 'libc.so.6', errno: '__errno_location' },
  { path: 'libc.musl-x86_64.so.1', errno: '__errno_location' },
  { path: 'libc.musl-aarch64.so.1', errno: '__errno_location' },
  { path: 'libc.so', errno: '__errno_location' },
  { path: '/usr/lib/libSystem.B.dylib', errno: '__error' },
] as const

/** EWOULDBLOCK: Linux 11, macOS 35. */
const HELD_ERRNOS = new Set([11, 35])

interface Libc {
  flock(fd: number, op: number): number
  errno(): number
}

let libc: Libc | null | undefined

function loadLibc(): Libc | null {
  if (libc !== undefined) return libc
  libc = null
  for (const { path, errno } of LIBCS) {
    try {
      const lib = dlopen(path, {
        flock: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 },
        [errno]: { args: [], returns: FFIType.ptr },
      })
      const where = lib.symbols[errno] as () => number
      const flock = lib.symbols.flock as (fd: number, op: number) => number
      libc = { flock, errno: () => read.i32(where() as never, 0) }
      break
    } catch {}
  }
  return libc
}

/** The lock is held by another process; `holder` is what it wrote into the file (null: unreadable). */
export class LockHeld extends Error {
  constructor(
    readonly path: string,
    readonly holder: Record<string, unknown> | null,
  ) {
    super(`${path} is locked by another process`)
  }
}

/**
 * Takes the lock on `path` (created if missing) without waiting, and writes `holder` (JSON) into the
 * file for whoever finds it held. Throws LockHeld when another process holds it. The returned
 * function releases it (the process's end does too). The file is never removed: a process that
 * opened it to wait for the lock would otherwise lock a file nobody else sees.
 */
export function holdLock(path: string, holder: Record<string, unknown>): () => void {
  const c = loadLibc()
  if (!c) throw new Error(`cannot lock ${path}: flock(2) is not available on this system`)
  const fd = openSync(path, constants.O_RDWR | constants.O_CREAT, 0o600)
  if (c.flock(fd, LOCK_EX | LOCK_NB) !== 0) {
    const errno = c.errno()
    closeSync(fd)
    if (!HELD_ERRNOS.has(errno)) throw new Error(`cannot lock ${path} (flock errno ${errno})`)
    // The holder writes itself in right after it locks: a start racing ours may not have yet.
    let holder = readHolder(path)
    for (let i = 0; holder === null && i < 50; i++) {
      Bun.sleepSync(10)
      holder = readHolder(path)
    }
    throw new LockHeld(path, holder)
  }
  ftruncateSync(fd, 0)
  writeSync(fd, `${JSON.stringify(holder)}\n`, 0)
  let held = true
  return () => {
    if (!held) return
    held = false
    closeSync(fd)
  }
}

function readHolder(path: string): Record<string, unknown> | null {
  try {
    const v = JSON.parse(readFileSync(path, 'utf8'))
    return v && typeof v === 'object' && !Array.isArray(v) ? v : null
  } catch {
    return null
  }
}
