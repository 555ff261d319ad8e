import { join } from 'node:path'
import type { Config } from '../../config'

/** Where a file's bytes live (API.md §5): DATA_DIR/files/<id>; the client's filename is never a path. */
export const filePath = (config: Pick<Config, 'DATA_DIR'>, id: string) => join(config.DATA_DIR, 'files', id)
