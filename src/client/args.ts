import { usageError } from './exit'

// The client commands' arguments: `--name value`, `--name=value`, short aliases (`-o OUT`), flags
// without a value, repeatable options, and positionals; `--` ends the options. Anything else is a
// usage error (exit 2) naming the argument, never a guess.

export interface OptionSpec {
  /** Takes a value (`--endpoint /v1/embeddings`); otherwise a flag. */
  value?: boolean
  /** May be given more than once; the values are kept in order. */
  repeat?: boolean
  /** One-letter alias, without the dash. */
  short?: string
}

export type Spec = Record<string, OptionSpec>

export interface Parsed {
  /** Values of options by long name: true for a flag, the last value, or every value of a repeat. */
  options: Record<string, string | true | string[]>
  positionals: string[]
}

export function parseArgs(argv: readonly string[], spec: Spec): Parsed {
  const options: Parsed['options'] = {}
  const positionals: string[] = []
  const byShort = new Map(Object.entries(spec).flatMap(([name, s]) => (s.short ? [[s.short, name]] : [])))
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === '--') {
      positionals.push(...argv.slice(i + 1))
      break
    }
    if (!arg.startsWith('-') || arg === '-') {
      positionals.push(arg)
      continue
    }
    const eq = arg.indexOf('=')
    const written = eq > 0 && arg.startsWith('--') ? arg.slice(0, eq) : arg
    const name = written.startsWith('--') ? written.slice(2) : byShort.get(written.slice(1))
    const option = name === undefined ? undefined : spec[name]
    if (name === undefined || !option || (!written.startsWith('--') && written.length !== 2))
      throw usageError(`unknown option '${written}'`)
    if (!option.value) {
      if (eq > 0 && arg.startsWith('--')) throw usageError(`option '--${name}' takes no value`)
      options[name] = true
      continue
    }
    let value: string | undefined
    if (eq > 0 && arg.startsWith('--')) value = arg.slice(eq + 1)
    else {
      value = argv[i + 1]
      if (value === undefined || (value.startsWith('-') && value !== '-'))
        throw usageError(`option '${written}' needs a value`)
      i++
    }
    if (option.repeat) {
      const list = options[name]
      options[name] = Array.isArray(list) ? [...list, value] : [value]
    } else options[name] = value
  }
  return { options, positionals }
}

/** The value of a value option, or undefined. */
export const stringOption = (p: Parsed, name: string): string | undefined => {
  const v = p.options[name]
  return typeof v === 'string' ? v : undefined
}

export const flag = (p: Parsed, name: string): boolean => p.options[name] === true

export const listOption = (p: Parsed, name: string): string[] => {
  const v = p.options[name]
  return Array.isArray(v) ? v : []
}

/** A number option within [min, max]; `fallback` when absent. */
export function numberOption(p: Parsed, name: string, fallback: number, min: number, max: number): number {
  const raw = stringOption(p, name)
  if (raw === undefined) return fallback
  const n = Number(raw)
  if (raw.trim() === '' || !Number.isFinite(n) || n < min || n > max)
    throw usageError(`--${name} must be a number from ${min} to ${max}, not '${raw}'`)
  return n
}

/** Exactly `names.length` positionals, named in the message when one is missing or extra. */
export function positionals(p: Parsed, names: string[]): string[] {
  if (p.positionals.length < names.length) throw usageError(`missing ${names[p.positionals.length]}`)
  if (p.positionals.length > names.length)
    throw usageError(`unexpected argument '${p.positionals[names.length]}'`)
  return p.positionals
}

/** `--metadata k=v` pairs (docs/api.md §6: at most 16 string pairs; the server checks the limits). */
export function metadataPairs(values: string[]): Record<string, string> | undefined {
  if (values.length === 0) return undefined
  const out: Record<string, string> = {}
  for (const pair of values) {
    const eq = pair.indexOf('=')
    if (eq <= 0) throw usageError(`--metadata takes KEY=VALUE, not '${pair}'`)
    out[pair.slice(0, eq)] = pair.slice(eq + 1)
  }
  return out
}
