import { startS3Server } from '../test/helpers/s3'

// `bun run test:s3 [paths…]`: the HTTP file, worker and validator suites again, with every app
// the test helpers build on the S3 engine (docs/api.md §12), against an s3rver on loopback that this
// script starts and stops. Extra arguments replace the default paths.

const paths = process.argv.slice(2)
const suites = paths.length
  ? paths
  : [
      'test/files',
      'test/workers',
      'test/services/validator.test.ts',
      'test/services/validator-restart.test.ts',
    ]
const s3 = await startS3Server()
try {
  const run = Bun.spawn(['bun', 'test', '--timeout', '30000', ...suites], {
    env: { ...process.env, GK_TEST_S3_ENDPOINT: s3.endpoint },
    stdio: ['inherit', 'inherit', 'inherit'],
  })
  process.exitCode = await run.exited
} finally {
  await s3.close()
}
