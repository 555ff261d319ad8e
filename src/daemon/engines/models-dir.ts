import { readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'

// The models directory of a launched engine (docs/worker.md "vLLM and other launched engines"):
// each model is a directory `<models-dir>/<runtime_model_id>/`, where runtime_model_id may hold `/`
// (`meta-llama/Llama-3.1-8B-Instruct`), as a hub download lays it out. A directory holding a
// weights file (*.safetensors, *.bin, *.pt, *.pth, *.gguf) is a model; one without is a namespace
// searched below, down to MAX_DEPTH. Hidden entries (`.cache`, `.gitattributes`) are skipped. A
// model's files are the regular files directly in its directory, weights first (hashed for the
// inventory, runtimes/managed.ts); its subdirectories (`original/`, another format of the same
// weights) are not its files.

const WEIGHTS = /\.(safetensors|bin|pt|pth|gguf)$/
const MAX_DEPTH = 4

/** The models under `root`: runtime_model_id → its directory. */
export function scanModels(root: string): Map<string, string> {
  const out = new Map<string, string>()
  const walk = (dir: string, prefix: string, depth: number) => {
    const entries = readdirSync(dir, { withFileTypes: true }).filter((e) => !e.name.startsWith('.'))
    for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      if (!isDir(join(dir, e.name))) continue
      const path = join(dir, e.name)
      const name = prefix + e.name
      let inside: string[]
      try {
        inside = readdirSync(path)
      } catch {
        continue
      }
      if (inside.some((f) => WEIGHTS.test(f) && isFile(join(path, f)))) out.set(name, path)
      else if (depth < MAX_DEPTH) walk(path, `${name}/`, depth + 1)
    }
  }
  walk(root, '', 1)
  return out
}

/** The regular files directly in a model's directory, weights first, each group by name. */
export function modelFiles(dir: string): string[] {
  let names: string[]
  try {
    names = readdirSync(dir).filter((f) => !f.startsWith('.') && isFile(join(dir, f)))
  } catch {
    return []
  }
  names.sort()
  return [...names.filter((f) => WEIGHTS.test(f)), ...names.filter((f) => !WEIGHTS.test(f))].map((f) =>
    join(dir, f),
  )
}

function isDir(path: string) {
  try {
    return statSync(path).isDirectory()
  } catch {
    return false
  }
}

function isFile(path: string) {
  try {
    return statSync(path).isFile()
  } catch {
    return false
  }
}
