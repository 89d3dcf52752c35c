// updateConfig's policyEdits and expectedRevision against a real gateway:
// edits in the CLI's forms applied to the sandbox's latest revision on the
// gateway, merge notes, malformed edits refused before anything is sent, and
// an expected revision that refuses a write whose sandbox moved on.

import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import { FailedPreconditionError, InvalidArgumentError } from '../index.js'
import { Harness } from './harness.mjs'

let h
before(async () => {
  h = await Harness.start()
})
after(async () => {
  await h?.stop()
})

async function latest(sandbox) {
  const { policy } = await h.client.getSandboxPolicy(sandbox)
  return { revision: policy.revision, yaml: policy.policyYaml ?? '' }
}

test('an added endpoint is a new revision with the rule', async () => {
  await h.sandbox('edit')
  assert.equal((await latest('edit')).revision, 1)
  const result = await h.client.updateConfig({
    target: { sandbox: 'edit' },
    policyEdits: { addEndpoints: ['registry.npmjs.org:443:read-only:rest:enforce'], binaries: ['/usr/bin/npm'] },
  })
  assert.equal(result.operation.policyRevision, 2)
  assert.deepEqual(result.mergeNotes, [])
  const { revision, yaml } = await latest('edit')
  assert.equal(revision, 2)
  assert.ok(yaml.includes('allow_registry_npmjs_org_443') && yaml.includes('/usr/bin/npm'), yaml)
  // The rest of the policy is the sandbox's own, not a document sent along.
  assert.ok(yaml.includes('api.github.com'), yaml)
})

test('an allow rule on an endpoint with an access preset returns a merge note', async () => {
  await h.sandbox('edit-note')
  await h.client.updateConfig({
    target: { sandbox: 'edit-note' },
    policyEdits: { addEndpoints: ['registry.npmjs.org:443:read-only:rest'] },
  })
  const result = await h.client.updateConfig({
    target: { sandbox: 'edit-note' },
    policyEdits: { addAllow: ['registry.npmjs.org:443:post:/-/npm/**'] },
  })
  assert.equal(result.operation.policyRevision, 3)
  assert.ok(
    result.mergeNotes.some((n) => n.includes('access preset read-only of endpoint registry.npmjs.org:443 was expanded')),
    JSON.stringify(result.mergeNotes),
  )
  assert.ok((await latest('edit-note')).yaml.includes('/-/npm/**'))
})

test('a malformed edit is refused naming its option, and nothing is sent', async () => {
  await h.sandbox('edit-bad')
  await assert.rejects(
    h.client.updateConfig({ target: { sandbox: 'edit-bad' }, policyEdits: { addEndpoints: ['npmjs.org'], removeRules: [' '] } }),
    (err) => {
      assert.ok(err instanceof InvalidArgumentError, String(err))
      assert.deepEqual(err.violations.map((v) => v.field), ['add_endpoints[0]', 'remove_rules[0]'])
      assert.match(err.violations[0].message, /expected HOST:PORT/)
      return true
    },
  )
  assert.equal((await latest('edit-bad')).revision, 1)
  assert.equal((await h.client.listOperations({ sandbox: 'edit-bad' })).length, 1, "only the create's operation")
})

test('an edit the gateway cannot apply names the merge operation', async () => {
  await h.sandbox('edit-refused')
  await assert.rejects(
    h.client.updateConfig({ target: { sandbox: 'edit-refused' }, policyEdits: { addDeny: ['nowhere.example:443:GET:/x'] } }),
    (err) => {
      assert.ok(err instanceof InvalidArgumentError, String(err))
      assert.deepEqual(err.violations.map((v) => v.field), ['merge_operations[0].add_deny_rules'])
      return true
    },
  )
  assert.equal((await latest('edit-refused')).revision, 1)
})

test('a stale expectedRevision writes nothing; the current one succeeds', async () => {
  await h.sandbox('edit-rev')
  const edit = (host, expectedRevision) =>
    h.client.updateConfig({ target: { sandbox: 'edit-rev' }, policyEdits: { addEndpoints: [`${host}:443`] }, expectedRevision })
  await edit('one.example.com', 1)
  assert.equal((await latest('edit-rev')).revision, 2)

  await assert.rejects(edit('two.example.com', 1), (err) => {
    assert.ok(err instanceof FailedPreconditionError, String(err))
    assert.equal(err.code, 'FAILED_PRECONDITION')
    assert.match(err.message, /is at revision 2, not the expected 1/)
    return true
  })
  const after = await latest('edit-rev')
  assert.equal(after.revision, 2)
  assert.ok(!after.yaml.includes('two.example.com'))

  // Read-modify-write: read the revision again and retry against it.
  const again = await edit('two.example.com', after.revision)
  assert.equal(again.operation.policyRevision, 3)
  assert.ok((await latest('edit-rev')).yaml.includes('two.example.com'))
})

test('validateOnly with edits reports the policy diff and writes nothing', async () => {
  await h.sandbox('edit-dry')
  const checked = await h.client.updateConfig({
    target: { sandbox: 'edit-dry' },
    policyEdits: { addEndpoints: ['registry.npmjs.org:443'], removeRules: ['pypi'] },
    validateOnly: true,
  })
  assert.equal(checked.operation, undefined)
  assert.deepEqual(checked.policyDiff.addedPolicies, ['allow_registry_npmjs_org_443'])
  assert.deepEqual(checked.policyDiff.removedPolicies, ['pypi'])
  assert.deepEqual(checked.mergeNotes, [])
  assert.equal((await latest('edit-dry')).revision, 1)
})

test('edit keys, entries and revisions are checked by name before anything is sent', async () => {
  const cases = [
    ['policyEdits.addEndpoint', { policyEdits: { addEndpoint: ['a:1'] } }, /is not an edit; the keys are addEndpoints/],
    ['policyEdits.addEndpoints[1]', { policyEdits: { addEndpoints: ['a.example:443', 2] } }, /must be a string/],
    ['policyEdits.binaries', { policyEdits: { binaries: '/usr/bin/npm' } }, /must be an array/],
    ['policyEdits.ruleName', { policyEdits: { ruleName: 3 } }, /must be a string/],
    ['expectedRevision', { expectedRevision: 0 }, /revision number/],
    ['expectedRevision', { expectedRevision: 1.5 }, /revision number/],
    ['expectedRevision', { expectedRevision: '2' }, /must be a number/],
  ]
  for (const [field, options, message] of cases) {
    await assert.rejects(h.client.updateConfig({ target: { sandbox: 'edit-args' }, ...options }), (err) => {
      assert.ok(err instanceof InvalidArgumentError, `${field}: ${err}`)
      assert.deepEqual(err.violations.map((v) => v.field), [field])
      assert.match(err.message, message)
      return true
    })
  }
})
