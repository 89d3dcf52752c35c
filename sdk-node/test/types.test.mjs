// The published types: index.d.ts and the generated native.d.ts must compile
// under `--strict` and describe what callers write (test/types/usage.ts).

import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import path from 'node:path'
import { test } from 'node:test'
import { promisify } from 'node:util'

import { SDK_DIR } from './harness.mjs'

const run = promisify(execFile)

test('index.d.ts type-checks a typical caller under --strict', async () => {
  const tsc = path.join(SDK_DIR, 'node_modules', 'typescript', 'bin', 'tsc')
  const args = [
    tsc,
    '--noEmit',
    '--strict',
    '--target', 'es2022',
    '--module', 'nodenext',
    '--moduleResolution', 'nodenext',
    '--types', 'node',
    path.join(SDK_DIR, 'test', 'types', 'usage.ts'),
  ]
  try {
    await run(process.execPath, args, { cwd: SDK_DIR })
  } catch (err) {
    assert.fail(`tsc failed:\n${err.stdout}${err.stderr}`)
  }
})
