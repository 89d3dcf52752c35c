// Smoke test of an installed @openshell/sdk (run by scripts/packages.sh from a
// fresh npm project that installed the packed tarball): creates a sandbox,
// runs its supervisor, commits a setting with this script's own idempotency
// key, waits for it to apply, repeats the write (a replay) and reads the
// setting back. The gateway comes from OPENSHELL_GATEWAY and OPENSHELL_TOKEN,
// the supervisor binary from OPENSHELL_BIN_DIR.

import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'

import { Client } from '@openshell/sdk'

const require = createRequire(import.meta.url)
const installed = path.dirname(require.resolve('@openshell/sdk/package.json'))
const workdir = fs.mkdtempSync(path.join(os.tmpdir(), 'openshell-smoke-node-'))
const policy = fs.readFileSync(process.env.OPENSHELL_SMOKE_POLICY, 'utf8')

const client = await Client.connect()
const created = await client.createSandbox({ name: 'smoke-node', policy })
const credential = path.join(workdir, 'credential')
fs.writeFileSync(credential, created.supervisorCredential, { mode: 0o600 })
const supervisor = spawn(
  path.join(process.env.OPENSHELL_BIN_DIR, 'openshell-supervisor'),
  [
    '--gateway', client.endpoint,
    '--sandbox', created.sandbox.id,
    '--credential-file', credential,
    '--state-dir', path.join(workdir, 'state'),
    '--poll-interval', '200ms',
    '--heartbeat-interval', '500ms',
    '--', 'sh', '-c', 'trap "" HUP; while :; do sleep 0.1; done',
  ],
  { detached: true, stdio: ['ignore', 'ignore', fs.openSync(path.join(workdir, 'supervisor.log'), 'a')] },
)

try {
  const request = {
    target: { sandbox: 'smoke-node' },
    settings: { log_level: 'debug' },
    mode: 'WAIT_FOR_APPLY',
    waitTimeoutMs: 120_000,
    idempotencyKey: 'smoke-node-log-level-debug',
  }
  const first = await client.updateConfig(request)
  assert.equal(first.operation.state, 'APPLIED', JSON.stringify(first.operation))
  const again = await client.updateConfig(request)
  assert.equal(again.idempotentReplay, true)
  assert.equal(again.operation.id, first.operation.id)
  const settings = await client.getSettings({ sandbox: 'smoke-node' })
  const level = settings.effective.find((s) => s.key === 'log_level')
  assert.equal(level?.value, 'debug', JSON.stringify(settings.effective))
  console.log(`@openshell/sdk from ${installed}: ${first.operation.id} APPLIED, replayed, log_level=${level.value}`)
} catch (err) {
  console.error(fs.readFileSync(path.join(workdir, 'supervisor.log'), 'utf8'))
  throw err
} finally {
  const exited = once(supervisor, 'exit')
  process.kill(-supervisor.pid, 'SIGTERM')
  await exited
  fs.rmSync(workdir, { recursive: true, force: true })
}
