// updateConfig's validateOnly and kept static sections against a real gateway:
// a dry run checks against the stored policy and writes nothing, and a policy
// that omits static sections keeps the sandbox's own.

import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import { InvalidArgumentError } from '../index.js'
import { Harness } from './harness.mjs'

const STATIC = `filesystem_policy:
  read_only: [/usr, /etc]
  read_write: [/tmp]
process:
  run_as_user: sandbox
  run_as_group: sandbox
`
const NETWORK = `network_policies:
  api:
    endpoints:
      - { host: api.example.com, port: 443 }
      - { host: old.example.com, port: 443 }
`
const FULL = `version: 1\n${STATIC}${NETWORK}`
// Network only: api gains one endpoint and loses another, pypi is new.
const NETWORK_ONLY = `version: 1
network_policies:
  api:
    endpoints:
      - { host: api.example.com, port: 443 }
      - { host: new.example.com, port: 8443 }
  pypi:
    endpoints:
      - { host: pypi.org, port: 443 }
`

let h
before(async () => {
  h = await Harness.start()
})
after(async () => {
  await h?.stop()
})

async function state(name) {
  const sandbox = await h.client.getSandbox(name)
  const ops = await h.client.listOperations({ sandbox: name })
  const settings = await h.client.getSettings({ sandbox: name })
  return { revision: sandbox.policyRevision, settingsRevision: sandbox.settingsRevision, ops: ops.length, values: settings.values }
}

test('validateOnly reports the diff and the kept sections and writes nothing', async () => {
  await h.sandbox('dry', { policy: FULL })
  const before = await state('dry')
  const request = {
    target: { sandbox: 'dry' },
    policy: NETWORK_ONLY,
    settings: { log_level: 'debug' },
    mode: 'WAIT_FOR_APPLY',
    idempotencyKey: 'dry-1',
  }
  const checked = await h.client.updateConfig({ ...request, validateOnly: true })
  assert.equal(checked.validateOnly, true)
  assert.equal(checked.operation, undefined)
  assert.equal(checked.idempotentReplay, false)
  assert.deepEqual(checked.keptStaticSections, ['filesystem_policy', 'process'])
  const diff = checked.policyDiff
  assert.deepEqual(diff.addedPolicies, ['pypi'])
  assert.deepEqual(diff.removedPolicies, [])
  assert.deepEqual(diff.changedPolicies, [
    {
      name: 'api',
      addedEndpoints: ['new.example.com:8443'],
      removedEndpoints: ['old.example.com:443'],
      changedEndpoints: [],
      changedFields: [],
    },
  ])
  assert.deepEqual(diff.changedStaticSections, [])
  assert.equal(diff.currentRevision, before.revision)
  assert.equal(checked.settingChanges.length, 1)
  const [setting] = checked.settingChanges
  assert.equal(setting.key, 'log_level')
  assert.equal(setting.oldValue, undefined)
  assert.equal(setting.newValue, 'debug')

  // Nothing was written: no revision, no operation, no setting.
  assert.deepEqual(await state('dry'), before)

  // The key was not taken: the real write with it commits, and keeps the same sections.
  const written = await h.client.updateConfig({ ...request, mode: 'COMMIT_ONLY' })
  assert.equal(written.idempotentReplay, false)
  assert.equal(written.validateOnly, false)
  assert.equal(written.operation.policyRevision, before.revision + 1)
  assert.deepEqual(written.keptStaticSections, ['filesystem_policy', 'process'])
  const stored = await h.client.getSandboxPolicy('dry')
  assert.match(stored.policy.policyYaml, /run_as_user: sandbox/)
  assert.match(stored.policy.policyYaml, /pypi\.org/)
  // A repeat is a replay of the same request, and says the same.
  const again = await h.client.updateConfig({ ...request, mode: 'COMMIT_ONLY' })
  assert.equal(again.idempotentReplay, true)
  assert.equal(again.operation.id, written.operation.id)
  assert.deepEqual(again.keptStaticSections, ['filesystem_policy', 'process'])
})

test('validateOnly refuses a changed static section with its field path', async () => {
  await h.sandbox('dry-static', { policy: FULL })
  const before = await state('dry-static')
  const err = await h.client
    .updateConfig({
      target: { sandbox: 'dry-static' },
      policy: FULL.replace('run_as_user: sandbox', 'run_as_user: "1500"'),
      mode: 'COMMIT_ONLY',
      validateOnly: true,
    })
    .then(() => assert.fail('a changed static section must be refused'), (e) => e)
  assert.ok(err instanceof InvalidArgumentError, String(err))
  assert.deepEqual(
    err.violations.map((v) => v.field),
    ['policy.process'],
  )
  assert.deepEqual(await state('dry-static'), before)
})
