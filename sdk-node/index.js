'use strict'
// @openshell/sdk: the Node.js SDK of OpenShell.
//
// This file is the idiomatic surface over the native binding (native.js, built
// from src/ by napi-rs over the shared Rust client core): a Client class whose
// methods reject with the classes of errors.js, and waits that take an
// AbortSignal and an onProgress callback. It adds no behaviour of its own;
// retries, timeouts and error codes are the Rust core's.

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
  fromNative,
} = require('./errors.js')

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

function isoTime(value) {
  return value instanceof Date ? value.toISOString() : value
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

/** A connection to one OpenShell gateway. Create one with Client.connect(). */
class Client {
  #native

  constructor(key, handle) {
    if (key !== CONSTRUCT) throw new TypeError('use Client.connect() to create a Client')
    this.#native = handle
  }

  static async connect(options) {
    const handle = await call(() => native.connect(options))
    return new Client(CONSTRUCT, handle)
  }

  get endpoint() {
    return this.#native.endpoint
  }

  createSandbox(options) {
    return call(() => this.#native.createSandbox(options))
  }

  getSandbox(sandbox) {
    return call(() => this.#native.getSandbox(sandbox))
  }

  listSandboxes(options) {
    return call(() => this.#native.listSandboxes(options))
  }

  deleteSandbox(sandbox) {
    return call(() => this.#native.deleteSandbox(sandbox))
  }

  setSandboxLifecycle(sandbox, lifecycle) {
    return call(() => this.#native.setSandboxLifecycle(sandbox, lifecycle))
  }

  createProvider(spec) {
    return call(() => this.#native.createProvider({ ...spec, expiresAt: isoTime(spec?.expiresAt) }))
  }

  updateProvider(update) {
    return call(() =>
      this.#native.updateProvider({ ...update, expiresAt: isoTime(update?.expiresAt) }),
    )
  }

  deleteProvider(provider, workspace) {
    return call(() => this.#native.deleteProvider(provider, workspace))
  }

  getProvider(provider, workspace) {
    return call(() => this.#native.getProvider(provider, workspace))
  }

  listProviders(workspace) {
    return call(() => this.#native.listProviders(workspace))
  }

  attachProvider(sandbox, provider) {
    return call(() => this.#native.attachProvider(sandbox, provider))
  }

  detachProvider(sandbox, provider) {
    return call(() => this.#native.detachProvider(sandbox, provider))
  }

  getSandboxPolicy(sandbox, revision) {
    return call(() => this.#native.getSandboxPolicy(sandbox, revision))
  }

  listSandboxPolicies(sandbox, limit) {
    return call(() => this.#native.listSandboxPolicies(sandbox, limit))
  }

  getSettings(target) {
    return call(() => this.#native.getSettings(target))
  }

  listSettingDefinitions() {
    return call(() => this.#native.listSettingDefinitions())
  }

  updateConfig(options) {
    return call(() => this.#native.updateConfig(options))
  }

  getOperation(id) {
    return call(() => this.#native.getOperation(id))
  }

  listOperations(options) {
    return call(() => this.#native.listOperations(options))
  }

  listSessions() {
    return call(() => this.#native.listSessions())
  }

  inspectSession(sandbox) {
    return call(() => this.#native.inspectSession(sandbox))
  }

  gatewayInfo() {
    return call(() => this.#native.gatewayInfo())
  }

  /** Starts following an operation; iterate the result with `for await`. */
  watchOperation(id, options) {
    let handle
    try {
      handle = this.#native.watchOperation(id, options)
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
  async waitForApply(id, options = {}) {
    const { onProgress, signal, ...watchOptions } = options
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
