'use strict'
// @openshell/sdk: the Node.js SDK of OpenShell.
//
// This file is the idiomatic surface over the native binding (native.js, built
// from src/ by napi-rs over the shared Rust client core): a Client class whose
// methods reject with the classes of errors.js, and waits that take an
// AbortSignal and an onProgress callback. It adds no behaviour of its own;
// retries, timeouts and error codes are the Rust core's.

const { readFileSync } = require('node:fs')

const native = require('./native.js')
const {
  OpenShellError,
  InvalidArgumentError,
  NotFoundError,
  AlreadyExistsError,
  FailedPreconditionError,
  UnauthenticatedError,
  UnavailableError,
  WaitTimeoutError,
  AbortError,
  argumentTypeError,
  fromNative,
} = require('./errors.js')

// The CLI's default gateway, used when neither `endpoint` nor OPENSHELL_GATEWAY names one.
const DEFAULT_ENDPOINT = 'http://127.0.0.1:7070'

// Only Client.connect may build a Client, so a Client always holds a live
// native connection.
const CONSTRUCT = Symbol('openshell.Client.construct')

async function call(fn) {
  try {
    return await fn()
  } catch (err) {
    throw fromNative(err)
  }
}

// A Date or RFC 3339 text; the text itself is checked by the Rust core.
function isoTime(name, value) {
  if (value === undefined || value === null || typeof value === 'string') return value ?? undefined
  if (!(value instanceof Date)) throw argumentTypeError(name, 'must be a Date or an RFC 3339 string')
  if (Number.isNaN(value.getTime())) {
    const message = 'is an invalid Date'
    throw new InvalidArgumentError(`${name}: ${message}`, { violations: [{ field: name, message }] })
  }
  return value.toISOString()
}

// Checks of the positional arguments. napi refuses a wrong type too, but
// without naming the argument; option objects are named by napi itself and
// translated in errors.js.
function text(name, value) {
  if (typeof value !== 'string') throw argumentTypeError(name, 'must be a string')
  return value
}

function optionalText(name, value) {
  return value === undefined || value === null ? undefined : text(name, value)
}

function optionalCount(name, value) {
  if (value === undefined || value === null) return undefined
  if (!Number.isInteger(value) || value < 0 || value > 0xffffffff) {
    throw argumentTypeError(name, 'must be a non-negative integer')
  }
  return value
}

function optionalNumber(name, value) {
  if (value === undefined || value === null) return undefined
  if (typeof value !== 'number') throw argumentTypeError(name, 'must be a number')
  return value
}

function optionalFunction(name, value) {
  if (value !== undefined && value !== null && typeof value !== 'function') {
    throw argumentTypeError(name, 'must be a function')
  }
  return value
}

function object(name, value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw argumentTypeError(name, 'must be an object')
  }
  return value
}

function optionalObject(name, value) {
  return value === undefined || value === null ? undefined : object(name, value)
}

// The entries of maps and arrays are checked here, not by napi, so an error
// names the entry (`env.GITHUB_TOKEN`, `states[1]`), not only its container.
// napi also reads any value's own properties as a map, so a string given for
// one would arrive as { 0: 'A', 1: '=' }: only plain objects pass.
const SETTING_TYPES = new Set(['string', 'number', 'boolean'])

function optionalMap(name, value, types, expected) {
  if (optionalObject(name, value) === undefined) return undefined
  for (const [key, item] of Object.entries(value)) {
    if (!types.has(typeof item)) throw argumentTypeError(`${name}.${key}`, `must be ${expected}`)
  }
  return value
}

function optionalStrings(name, value) {
  if (value === undefined || value === null) return undefined
  if (!Array.isArray(value)) throw argumentTypeError(name, 'must be an array')
  value.forEach((item, index) => {
    if (typeof item !== 'string') throw argumentTypeError(`${name}[${index}]`, 'must be a string')
  })
  return value
}

const STRING = new Set(['string'])

function providerInput(name, value) {
  const checked = object(name, value)
  optionalMap('env', checked.env, STRING, 'a string')
  optionalMap('credentials', checked.credentials, STRING, 'a string')
  return { ...checked, expiresAt: isoTime('expiresAt', checked.expiresAt) }
}

// The keys of UpdateConfigOptions.policyEdits: a misspelt one would otherwise
// be dropped by napi without a word, and the write would go out without it.
const POLICY_EDIT_LISTS = ['addEndpoints', 'removeEndpoints', 'addAllow', 'addDeny', 'removeRules', 'binaries']

function policyEdits(name, value) {
  if (optionalObject(name, value) === undefined) return undefined
  for (const key of Object.keys(value)) {
    if (key === 'ruleName') {
      optionalText(`${name}.ruleName`, value.ruleName)
    } else if (POLICY_EDIT_LISTS.includes(key)) {
      optionalStrings(`${name}.${key}`, value[key])
    } else {
      const message = `is not an edit; the keys are ${[...POLICY_EDIT_LISTS, 'ruleName'].join(', ')}`
      throw new InvalidArgumentError(`${name}.${key}: ${message}`, {
        violations: [{ field: `${name}.${key}`, message }],
      })
    }
  }
  return value
}

function updateConfigOptions(options) {
  const checked = object('options', options)
  optionalMap('settings', checked.settings, SETTING_TYPES, 'a string, number or boolean')
  optionalStrings('deleteSettings', checked.deleteSettings)
  policyEdits('policyEdits', checked.policyEdits)
  optionalNumber('expectedRevision', checked.expectedRevision)
  return checked
}

function listOperationsOptions(options) {
  const checked = optionalObject('options', options)
  if (checked !== undefined) {
    optionalCount('pageSize', checked.pageSize)
    optionalStrings('states', checked.states)
  }
  return checked
}

function listOperationTargetsOptions(options) {
  const checked = optionalObject('options', options)
  if (checked !== undefined) {
    optionalStrings('states', checked.states)
    optionalCount('pageSize', checked.pageSize)
    optionalText('pageToken', checked.pageToken)
  }
  return checked
}

/**
 * Connect options with what the caller left out taken from the CLI's
 * environment variables: OPENSHELL_GATEWAY, OPENSHELL_TOKEN and
 * OPENSHELL_CA_CERT (the path of a PEM file). Empty variables count as unset.
 */

function connectOptions(options) {
  const resolved = { ...optionalObject('options', options) }
  const env = process.env
  if (resolved.endpoint === undefined) resolved.endpoint = env.OPENSHELL_GATEWAY || DEFAULT_ENDPOINT
  if (resolved.token === undefined && env.OPENSHELL_TOKEN) resolved.token = env.OPENSHELL_TOKEN
  if (resolved.caCertPem === undefined && env.OPENSHELL_CA_CERT) {
    const file = env.OPENSHELL_CA_CERT
    try {
      resolved.caCertPem = readFileSync(file, 'utf8')
    } catch (err) {
      const message = `cannot read the CA certificate file ${file}: ${err.message}`
      throw new InvalidArgumentError(`OPENSHELL_CA_CERT: ${message}`, {
        violations: [{ field: 'OPENSHELL_CA_CERT', message }],
        cause: err,
      })
    }
  }
  return resolved
}

/**
 * A running wait on one operation, usable as an async iterator: each value is
 * the operation after a state change, the last one terminal. If the wait
 * deadline passes first, iteration throws a WaitTimeoutError. Breaking out of
 * a `for await` loop, or calling cancel(), stops the wait (not the operation).
 */
class OperationWatch {
  #native
  #finished = false
  #final = undefined

  constructor(handle, operationId) {
    this.#native = handle
    this.operationId = operationId
  }

  async next() {
    if (this.#finished) return { done: true, value: this.#final }
    let event
    try {
      event = await this.#native.next()
    } catch (err) {
      this.#finished = true
      throw fromNative(err)
    }
    if (event === null) {
      // Cancelled: the stream ended without a verdict.
      this.#finished = true
      return { done: true, value: undefined }
    }
    switch (event.kind) {
      case 'progress':
        return { done: false, value: event.operation }
      case 'done':
        this.#finished = true
        this.#final = event.operation
        return { done: true, value: event.operation }
      case 'timedOut':
        this.#finished = true
        throw new WaitTimeoutError(event.operation)
      default:
        this.#finished = true
        throw new OpenShellError(`unexpected watch event ${event.kind}`, { code: 'INTERNAL' })
    }
  }

  /** Called by `for await` on break: stops the wait. */
  async return(value) {
    this.cancel()
    return { done: true, value }
  }

  /** Stops waiting; the operation is untouched on the gateway. */
  cancel() {
    this.#finished = true
    this.#native.cancel()
  }

  [Symbol.asyncIterator]() {
    return this
  }
}

/**
 * A followed sandbox's log lines, as an async iterator: each value is
 * `{ kind: 'line', line }` or `{ kind: 'dropped', droppedLines, message }`.
 * It does not end by itself while the sandbox lives: `break` or `cancel()`.
 */
class SandboxLogWatch {
  #native
  #finished = false

  constructor(handle, sandbox) {
    this.#native = handle
    this.sandbox = sandbox
  }

  async next() {
    if (this.#finished) return { done: true, value: undefined }
    let event
    try {
      event = await this.#native.next()
    } catch (err) {
      this.#finished = true
      throw fromNative(err)
    }
    if (event === null) {
      this.#finished = true
      return { done: true, value: undefined }
    }
    return { done: false, value: event }
  }

  /** Called by `for await` on break: stops following. */
  async return(value) {
    this.cancel()
    return { done: true, value }
  }

  /** Stops following; closes the stream to the gateway. */
  cancel() {
    this.#finished = true
    this.#native.cancel()
  }

  [Symbol.asyncIterator]() {
    return this
  }
}

function logOptions(options) {
  const checked = optionalObject('options', options)
  if (checked !== undefined) {
    optionalCount('lines', checked.lines)
    optionalStrings('sources', checked.sources)
  }
  return checked
}

/** A connection to one OpenShell gateway. Create one with Client.connect(). */
class Client {
  #native

  constructor(key, handle) {
    if (key !== CONSTRUCT) throw new TypeError('use Client.connect() to create a Client')
    this.#native = handle
  }

  static async connect(options) {
    const handle = await call(() => native.connect(connectOptions(options)))
    return new Client(CONSTRUCT, handle)
  }

  get endpoint() {
    return this.#native.endpoint
  }

  createSandbox(options) {
    return call(() => this.#native.createSandbox(object('options', options)))
  }

  getSandbox(sandbox) {
    return call(() => this.#native.getSandbox(text('sandbox', sandbox)))
  }

  listSandboxes(options) {
    return call(() => this.#native.listSandboxes(optionalObject('options', options)))
  }

  deleteSandbox(sandbox) {
    return call(() => this.#native.deleteSandbox(text('sandbox', sandbox)))
  }

  setSandboxLifecycle(sandbox, lifecycle) {
    return call(() => this.#native.setSandboxLifecycle(text('sandbox', sandbox), text('lifecycle', lifecycle)))
  }

  createProvider(spec) {
    return call(() => this.#native.createProvider(providerInput('spec', spec)))
  }

  updateProvider(update) {
    return call(() => this.#native.updateProvider(providerInput('update', update)))
  }

  deleteProvider(provider, workspace) {
    return call(() => this.#native.deleteProvider(text('provider', provider), optionalText('workspace', workspace)))
  }

  getProvider(provider, workspace) {
    return call(() => this.#native.getProvider(text('provider', provider), optionalText('workspace', workspace)))
  }

  listProviders(workspace) {
    return call(() => this.#native.listProviders(optionalText('workspace', workspace)))
  }

  attachProvider(sandbox, provider) {
    return call(() => this.#native.attachProvider(text('sandbox', sandbox), text('provider', provider)))
  }

  detachProvider(sandbox, provider) {
    return call(() => this.#native.detachProvider(text('sandbox', sandbox), text('provider', provider)))
  }

  getSandboxPolicy(sandbox, revision) {
    return call(() => this.#native.getSandboxPolicy(text('sandbox', sandbox), optionalNumber('revision', revision)))
  }

  listSandboxPolicies(sandbox, limit) {
    return call(() => this.#native.listSandboxPolicies(text('sandbox', sandbox), optionalCount('limit', limit)))
  }

  getGlobalPolicy(revision) {
    return call(() => this.#native.getGlobalPolicy(optionalNumber('revision', revision)))
  }

  listGlobalPolicies(limit) {
    return call(() => this.#native.listGlobalPolicies(optionalCount('limit', limit)))
  }

  getSettings(target) {
    return call(() => this.#native.getSettings(object('target', target)))
  }

  listSettingDefinitions() {
    return call(() => this.#native.listSettingDefinitions())
  }

  updateConfig(options) {
    return call(() => this.#native.updateConfig(updateConfigOptions(options)))
  }

  getOperation(id) {
    return call(() => this.#native.getOperation(text('id', id)))
  }

  listOperations(options) {
    return call(() => this.#native.listOperations(listOperationsOptions(options)))
  }

  listOperationTargets(id, options) {
    return call(() => this.#native.listOperationTargets(text('id', id), listOperationTargetsOptions(options)))
  }

  listSessions() {
    return call(() => this.#native.listSessions())
  }

  inspectSession(sandbox) {
    return call(() => this.#native.inspectSession(text('sandbox', sandbox)))
  }

  gatewayInfo() {
    return call(() => this.#native.gatewayInfo())
  }

  /** A sandbox's recent log lines (provider values masked), oldest first. */
  getSandboxLogs(sandbox, options) {
    return call(() => this.#native.getSandboxLogs(text('sandbox', sandbox), logOptions(options)))
  }

  /** Follows a sandbox's log lines; iterate the result with `for await`. */
  watchSandboxLogs(sandbox, options) {
    let handle
    try {
      handle = this.#native.watchSandboxLogs(text('sandbox', sandbox), logOptions(options))
    } catch (err) {
      throw fromNative(err)
    }
    return new SandboxLogWatch(handle, sandbox)
  }

  /** Starts following an operation; iterate the result with `for await`. */
  watchOperation(id, options) {
    let handle
    try {
      handle = this.#native.watchOperation(text('id', id), optionalObject('options', options))
    } catch (err) {
      throw fromNative(err)
    }
    return new OperationWatch(handle, id)
  }

  /**
   * Resolves to the operation once it is terminal (whatever its state: a
   * FAILED operation resolves too, inspect `.state`) or, for fleet
   * operations, once `threshold` is met. Rejects with WaitTimeoutError when
   * the deadline passes first, and with AbortError as soon as `signal`
   * aborts; neither changes the operation on the gateway.
   */
  async waitForApply(id, options) {
    const { onProgress, signal, ...watchOptions } = optionalObject('options', options) ?? {}
    optionalFunction('onProgress', onProgress)
    if (signal !== undefined && signal !== null && !(signal instanceof AbortSignal)) {
      throw argumentTypeError('signal', 'must be an AbortSignal')
    }
    if (signal?.aborted) throw new AbortError(id, signal.reason)
    const watch = this.watchOperation(id, watchOptions)
    let onAbort
    const aborted = new Promise((_, reject) => {
      onAbort = () => {
        watch.cancel()
        reject(new AbortError(id, signal.reason))
      }
      signal?.addEventListener('abort', onAbort, { once: true })
    })
    const follow = (async () => {
      for (;;) {
        const step = await watch.next()
        if (step.done) return step.value
        onProgress?.(step.value)
      }
    })()
    try {
      return await Promise.race([follow, aborted])
    } finally {
      signal?.removeEventListener('abort', onAbort)
      // Ends the Rust-side wait on every exit, including an onProgress throw.
      watch.cancel()
    }
  }
}

// Shorthand properties only: Node's ESM loader finds the named exports of a
// CommonJS module by reading this literal, so `import { Client } from
// '@openshell/sdk'` works only for names written this way.
module.exports = {
  Client,
  OperationWatch,
  SandboxLogWatch,
  OpenShellError,
  InvalidArgumentError,
  NotFoundError,
  AlreadyExistsError,
  FailedPreconditionError,
  UnauthenticatedError,
  UnavailableError,
  WaitTimeoutError,
  AbortError,
}
