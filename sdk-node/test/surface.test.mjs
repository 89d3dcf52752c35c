// One surface with the Rust core and the Python SDK: every core call is a
// Client method, connect and updateConfig have the same defaults (endpoint
// and token from the CLI's environment, mode COMMIT_ONLY), an unreachable
// gateway is named, and arguments of the wrong type are TypeErrors naming them.

import assert from 'node:assert/strict'
import fs from 'node:fs'
import path from 'node:path'
import { after, before, test } from 'node:test'

import {
  Client,
  InvalidArgumentError,
  OpenShellError,
  UnauthenticatedError,
  UnavailableError,
} from '../index.js'
import { Harness, SDK_DIR, freePort } from './harness.mjs'

let h
before(async () => {
  h = await Harness.start()
  await h.sandbox('surface')
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

// Core calls whose Node name is not the camelCase of the Rust one.
const RENAMED = {
  connect: 'connect', // static: Client.connect(options)
  wait_for_apply: 'watchOperation', // the stream of updates, as an async iterator
  wait_for_apply_final: 'waitForApply', // the final operation
}

// Core calls the Node SDK leaves out: token administration is the CLI's
// (`openshell token`) and the Rust SDK's only.
const NOT_EXPOSED = new Set(['create_token', 'list_tokens', 'revoke_token'])

function coreCalls() {
  const src = path.join(SDK_DIR, '..', 'sdk-rs', 'src')
  const files = [path.join(src, 'client.rs'), path.join(src, 'wait.rs')]
  for (const name of fs.readdirSync(path.join(src, 'calls')).sort()) {
    if (name.endsWith('.rs')) files.push(path.join(src, 'calls', name))
  }
  const calls = new Set()
  for (const file of files) {
    for (const match of fs.readFileSync(file, 'utf8').matchAll(/pub async fn (\w+)/g)) calls.add(match[1])
  }
  return calls
}

const camel = (name) => name.replace(/_(\w)/g, (_, c) => c.toUpperCase())

test('every call of the Rust core is a Client method', () => {
  const calls = coreCalls()
  assert.ok(calls.has('update_config') && calls.has('get_provider'), [...calls].join(' '))
  for (const name of calls) {
    if (NOT_EXPOSED.has(name)) continue
    const js = RENAMED[name] ?? camel(name)
    const owner = name === 'connect' ? Client : Client.prototype
    assert.equal(typeof owner[js], 'function', `Client lacks ${js} (core: ${name})`)
  }
})

test('connect takes endpoint and token from OPENSHELL_GATEWAY and OPENSHELL_TOKEN', async (t) => {
  const saved = { ...process.env }
  t.after(() => {
    for (const name of ['OPENSHELL_GATEWAY', 'OPENSHELL_TOKEN', 'OPENSHELL_CA_CERT']) {
      if (saved[name] === undefined) delete process.env[name]
      else process.env[name] = saved[name]
    }
  })
  process.env.OPENSHELL_GATEWAY = h.endpoint
  process.env.OPENSHELL_TOKEN = h.token
  const client = await Client.connect()
  assert.equal(client.endpoint, h.endpoint)
  assert.equal((await client.getSandbox('surface')).name, 'surface')

  // Options win over the environment.
  const wrong = await Client.connect({ token: 'not-the-token' })
  assert.ok((await failure(wrong.getSandbox('surface'))) instanceof UnauthenticatedError)

  process.env.OPENSHELL_CA_CERT = path.join(h.dir, 'missing.pem')
  const ca = await failure(Client.connect())
  assert.ok(ca instanceof InvalidArgumentError, String(ca))
  assert.deepEqual(ca.violations.map((v) => v.field), ['OPENSHELL_CA_CERT'])
  delete process.env.OPENSHELL_CA_CERT

  // Unset or empty: the CLI's default gateway (nothing listens there in the tests).
  process.env.OPENSHELL_GATEWAY = ''
  const unreachable = await failure(Client.connect({ connectTimeoutMs: 2000 }))
  assert.ok(unreachable instanceof UnavailableError || unreachable.message.includes('127.0.0.1:7070'))
  assert.match(unreachable.message, /127\.0\.0\.1:7070/)
})

test('the token is optional; a call without one is UnauthenticatedError', async () => {
  const client = await Client.connect({ endpoint: h.endpoint })
  const err = await failure(client.gatewayInfo())
  assert.ok(err instanceof UnauthenticatedError, String(err))
})

test('updateConfig commits only unless mode says otherwise', async () => {
  const { operation } = await h.client.updateConfig({
    target: { sandbox: 'surface' },
    settings: { log_level: 'warn' },
  })
  // No supervisor runs for this sandbox: only a commit-only write returns at once.
  assert.equal(operation.state, 'PENDING')
  assert.equal(operation.waitTimedOut, false)
})

test('an unreachable gateway is named in the error', async () => {
  const endpoint = `http://127.0.0.1:${await freePort()}`
  const err = await failure(Client.connect({ endpoint, connectTimeoutMs: 2000 }))
  assert.ok(err instanceof UnavailableError, String(err))
  assert.ok(err.message.includes(endpoint), err.message)
})

async function typeError(promise, field, message) {
  const err = await failure(promise)
  assert.ok(err instanceof TypeError, `${err}`)
  assert.ok(err instanceof InvalidArgumentError, `${err}`)
  assert.ok(err instanceof OpenShellError, `${err}`)
  assert.equal(err.code, 'INVALID_ARGUMENT')
  assert.equal(err.message, `${field} ${message}`)
  assert.deepEqual(err.violations, [{ field, message }])
  assert.ok(!/napi|rust type/i.test(err.message), err.message)
}

test('arguments of the wrong type are TypeErrors naming the argument', async () => {
  const c = h.client
  const sandbox = { sandbox: 'surface' }
  await typeError(
    c.updateConfig({ target: sandbox, mode: 'WAIT_FOR_APPLY', waitTimeoutMs: '5000' }),
    'waitTimeoutMs',
    'must be a number of milliseconds',
  )
  await typeError(
    Client.connect({ endpoint: h.endpoint, connectTimeoutMs: '10s' }),
    'connectTimeoutMs',
    'must be a number of milliseconds',
  )
  await typeError(Client.connect({ endpoint: 7070 }), 'endpoint', 'must be a string')
  await typeError(c.updateConfig({ target: { sandbox: 5 } }), 'target.sandbox', 'must be a string')
  await typeError(c.updateConfig({ settings: { log_level: 'warn' } }), 'target', 'is required')
  await typeError(c.updateConfig({ target: sandbox, policy: 1 }), 'policy', 'must be a string')
  await typeError(c.updateConfig({ target: sandbox, validateOnly: 'yes' }), 'validateOnly', 'must be a boolean')
  await typeError(
    c.updateConfig({ target: sandbox, mode: 'SOMETIMES' }),
    'mode',
    'must be a UpdateMode name, not "SOMETIMES"',
  )
  await typeError(c.updateConfig({ target: sandbox, settings: 'log_level=warn' }), 'settings', 'must be an object')
  await typeError(c.getSandbox(5), 'sandbox', 'must be a string')
  await typeError(c.getOperation(), 'id', 'must be a string')
  await typeError(c.setSandboxLifecycle('surface', 'NOPE'), 'lifecycle', 'must be a SandboxLifecycle name, not "NOPE"')
  await typeError(c.listSandboxPolicies('surface', -1), 'limit', 'must be a non-negative integer')
  await typeError(c.getSandboxPolicy('surface', '1'), 'revision', 'must be a number')
  await typeError(c.listOperations({ pageSize: 'ten' }), 'pageSize', 'must be a non-negative integer')
  await typeError(c.listOperations({ states: 'PENDING' }), 'states', 'must be an array')
  await typeError(c.createSandbox('surface'), 'options', 'must be an object')
  await typeError(c.createProvider({ name: 'p', type: 'github', env: { A: 1 } }), 'env.A', 'must be a string')
  await typeError(c.createProvider({ name: 'p', type: 'github', credentials: 'A=1' }), 'credentials', 'must be an object')
  await typeError(c.waitForApply('op-x', { timeoutMs: 'soon' }), 'timeoutMs', 'must be a number of milliseconds')
})
