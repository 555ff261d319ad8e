// Runs s3rver under Node for the tests (test/helpers/s3.ts): `node --openssl-legacy-provider
// s3rver-main.cjs <dir> <bucket>` prints `port <n>` once listening. Node, not Bun: s3rver signs
// its listing continuation tokens with DES, which Bun's crypto lacks and Node 20 has only with
// the legacy provider; without it every listing of more than one page fails.
const S3rver = require('s3rver')

const [dir, bucket] = process.argv.slice(2)
const server = new S3rver({
  address: '127.0.0.1',
  port: 0,
  directory: dir,
  silent: !process.env.S3RVER_LOG,
  configureBuckets: [{ name: bucket, configs: [] }],
})
server.run().then(({ port }) => process.stdout.write(`port ${port}\n`))
process.on('SIGTERM', () => server.close().then(() => process.exit(0)))
// The test process holds our stdin: when it ends, however it ends, so do we.
process.stdin.on('end', () => process.exit(0))
process.stdin.resume()
