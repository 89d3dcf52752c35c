// Every failure reaches JS as an OpenShellError subclass carrying the sdk's
// stable code.

import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import {
  AlreadyExistsError,
  Client,
  InvalidArgumentError,
  NotFoundError,
  OpenShellError,
  UnauthenticatedError,
  UnavailableError,
} from '../index.js'
import { Harness, freePort } from './harness.mjs'

let h
before(async () => {
  h = await Harness.start()
  await h.sandbox('errs')
})
after(async () => {
  await h?.stop()
})

async function failure(promise) {
  return promise.then(
    (value) => assert.fail(`expected a rejection, got ${JSON.stringify(value)}`),
    (err) => err,
  )
}

test('a bad policy is an InvalidArgumentError naming the field path', async () => {
  const policy = [
    'version: 1',
    'network_policies:',
    '  web:',
    '    endpoints:',
    '      - host: example.com',
    '        port: 70000',
    '',
  ].join('\n')
  const err = await failure(
    h.client.updateConfig({ target: { sandbox: 'errs' }, policy, mode: 'WAIT_FOR_APPLY' }),
  )
  assert.ok(err instanceof InvalidArgumentError, String(err))
  assert.ok(err instanceof OpenShellError)
  assert.ok(err instanceof Error)
  assert.equal(err.code, 'INVALID_ARGUMENT')
  assert.equal(err.name, 'InvalidArgumentError')
  const fields = err.violations.map((v) => v.field)
  assert.ok(
    fields.some((f) => f.endsWith('network_policies.web.endpoints[0].port')),
    `violations: ${JSON.stringify(err.violations)}`,
  )
  assert.ok(err.violations.every((v) => typeof v.message === 'string' && v.message.length > 0))
})

test('a wrong token is an UnauthenticatedError', async () => {
  const client = await Client.connect({ endpoint: h.endpoint, token: 'not-the-token' })
  const err = await failure(client.listSandboxes())
  assert.ok(err instanceof UnauthenticatedError, String(err))
  assert.equal(err.code, 'UNAUTHENTICATED')
  assert.ok(!err.message.includes('not-the-token'))
})

test('an unknown operation is a NotFoundError, in get and in wait', async () => {
  const err = await failure(h.client.getOperation('op-00000000-0000-7000-8000-000000000000'))
  assert.ok(err instanceof NotFoundError, String(err))
  assert.equal(err.code, 'NOT_FOUND')
  const waitErr = await failure(h.client.waitForApply('op-00000000-0000-7000-8000-000000000000'))
  assert.ok(waitErr instanceof NotFoundError, String(waitErr))
})

test('an unknown sandbox is a NotFoundError; a taken name is AlreadyExistsError', async () => {
  assert.ok((await failure(h.client.getSandbox('no-such-sandbox'))) instanceof NotFoundError)
  const taken = await failure(h.client.createSandbox({ name: 'errs' }))
  assert.ok(taken instanceof AlreadyExistsError, String(taken))
  assert.equal(taken.code, 'ALREADY_EXISTS')
})

test('inputs the binding refuses are InvalidArgumentErrors before anything is sent', async () => {
  const both = await failure(
    h.client.updateConfig({ target: { sandbox: 'errs', global: true }, mode: 'COMMIT_ONLY' }),
  )
  assert.ok(both instanceof InvalidArgumentError)
  assert.deepEqual(both.violations.map((v) => v.field), ['target'])

  const negative = await failure(
    h.client.updateConfig({ target: { sandbox: 'errs' }, mode: 'WAIT_FOR_APPLY', waitTimeoutMs: -1 }),
  )
  assert.deepEqual(negative.violations.map((v) => v.field), ['waitTimeoutMs'])

  const threshold = await failure(h.client.waitForApply('op-x', { threshold: 2 }))
  assert.ok(threshold instanceof InvalidArgumentError)
  assert.deepEqual(threshold.violations.map((v) => v.field), ['wait.threshold'])

  const mode = await failure(h.client.updateConfig({ target: { sandbox: 'errs' }, mode: 'SOMETIMES' }))
  assert.ok(mode instanceof InvalidArgumentError, String(mode))

  const endpoint = await failure(Client.connect({ endpoint: '127.0.0.1:1', token: 't' }))
  assert.ok(endpoint instanceof InvalidArgumentError)
})

test('an unreachable gateway is an UnavailableError', async () => {
  const port = await freePort()
  const err = await failure(
    Client.connect({ endpoint: `http://127.0.0.1:${port}`, token: 't', connectTimeoutMs: 2000 }),
  )
  assert.ok(err instanceof UnavailableError, String(err))
  assert.equal(err.code, 'UNAVAILABLE')
})

test('a Client cannot be built without connect()', () => {
  assert.throws(() => new Client(), TypeError)
})
