// Real processes for the SDK tests: one openshell-gateway per test file and
// openshell-supervisor processes for its sandboxes, built by
// `cargo build --workspace --bins` (directory overridable with
// OPENSHELL_BIN_DIR). Everything started here is killed by `stop()`, and by
// a process 'exit' hook should a test file die first.
//
// The package under test is this directory, or the one OPENSHELL_SDK_PACKAGE
// names: scripts/packages.sh points it at the tarball installed in a fresh
// project, so the guide's examples run from that install.

import { spawn } from 'node:child_process'
import { once } from 'node:events'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'

export const SDK_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
export const SDK_PACKAGE = path.resolve(process.env.OPENSHELL_SDK_PACKAGE ?? SDK_DIR)
const { Client } = createRequire(import.meta.url)(SDK_PACKAGE)
export const BIN_DIR = path.resolve(
  process.env.OPENSHELL_BIN_DIR ?? path.join(SDK_DIR, '..', 'target', 'debug'),
)
export const EXAMPLE_POLICY = fs.readFileSync(
  path.join(SDK_DIR, '..', 'examples', 'policy.yaml'),
  'utf8',
)

/** The example policy with its first endpoint on `port`: a new revision per port. */
export function policyWithPort(port) {
  const changed = EXAMPLE_POLICY.replace('port: 443', `port: ${port}`)
  if (changed === EXAMPLE_POLICY) throw new Error('examples/policy.yaml has no "port: 443" to change')
  return changed
}

// A workload that survives the supervisor's reload signal and never exits.
const WORKLOAD = ['sh', '-c', 'trap "" HUP; while :; do sleep 0.1; done']

const live = new Set()
process.on('exit', () => {
  for (const child of live) killGroup(child, 'SIGKILL')
})

function killGroup(child, signal) {
  try {
    // Negative pid: the child leads its own group (detached), so this also
    // reaches the supervisor's workload.
    process.kill(-child.pid, signal)
  } catch {
    // Already gone.
  }
}

function binary(name) {
  const file = path.join(BIN_DIR, name)
  if (!fs.existsSync(file)) {
    throw new Error(`${file} is missing: run \`cargo build --workspace --bins\` or set OPENSHELL_BIN_DIR`)
  }
  return file
}

function startProcess(file, args, logFile) {
  const log = fs.openSync(logFile, 'a')
  const child = spawn(file, args, { detached: true, stdio: ['ignore', log, log] })
  fs.closeSync(log)
  live.add(child)
  child.once('exit', () => live.delete(child))
  return child
}

async function stopProcess(child) {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = once(child, 'exit')
  killGroup(child, 'SIGTERM')
  const timer = setTimeout(() => killGroup(child, 'SIGKILL'), 5000)
  await exited
  clearTimeout(timer)
}

export async function freePort() {
  const server = net.createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address()
  server.close()
  await once(server, 'close')
  return port
}

async function waitForPort(port, child, logFile) {
  const deadline = Date.now() + 30_000
  for (;;) {
    if (child.exitCode !== null) {
      throw new Error(`gateway exited with ${child.exitCode}:\n${fs.readFileSync(logFile, 'utf8')}`)
    }
    const open = await new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1')
      socket.once('connect', () => {
        socket.destroy()
        resolve(true)
      })
      socket.once('error', () => resolve(false))
    })
    if (open) return
    if (Date.now() > deadline) {
      throw new Error(`gateway did not listen on ${port}:\n${fs.readFileSync(logFile, 'utf8')}`)
    }
    await sleep(50)
  }
}

/** Polls `check` until it returns a truthy value; for states the SDK cannot wait on. */
export async function eventually(check, { timeoutMs = 30_000, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await check()
    if (value) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(100)
  }
}

/** A supervisor process for one sandbox. */
class Supervisor {
  constructor(child, logFile) {
    this.child = child
    this.logFile = logFile
  }

  log() {
    return fs.readFileSync(this.logFile, 'utf8')
  }

  stop() {
    return stopProcess(this.child)
  }
}

/** One sandbox of the harness gateway, with what its supervisor needs. */
class TestSandbox {
  constructor(harness, created, credentialFile) {
    this.harness = harness
    this.sandbox = created.sandbox
    this.id = created.sandbox.id
    this.name = created.sandbox.name
    this.initialOperation = created.operation
    this.credentialFile = credentialFile
    this.supervisor = undefined
  }

  /** Starts `openshell-supervisor` for this sandbox (once connected, it applies). */
  startSupervisor({ onApply } = {}) {
    const h = this.harness
    const stateDir = fs.mkdtempSync(path.join(h.dir, `state-${this.name}-`))
    const args = [
      '--gateway', h.endpoint,
      '--sandbox', this.id,
      '--credential-file', this.credentialFile,
      '--state-dir', stateDir,
      '--poll-interval', '200ms',
      '--heartbeat-interval', '500ms',
    ]
    if (onApply) args.push('--on-apply', onApply)
    args.push('--', ...WORKLOAD)
    const logFile = path.join(h.dir, `supervisor-${this.name}.log`)
    this.supervisor = new Supervisor(startProcess(binary('openshell-supervisor'), args, logFile), logFile)
    h.supervisors.push(this.supervisor)
    return this.supervisor
  }
}

/** A gateway with an operator token, a connected Client and helpers for sandboxes. */
export class Harness {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'openshell-sdk-node-'))
    this.token = 'tok-node-sdk-tests'
    this.supervisors = []
    this.gateway = undefined
    this.client = undefined
    this.endpoint = undefined
  }

  static async start() {
    const h = new Harness()
    await h.startGateway()
    return h
  }

  async startGateway() {
    const port = await freePort()
    this.endpoint = `http://127.0.0.1:${port}`
    this.gatewayLog = path.join(this.dir, 'gateway.log')
    const dataDir = path.join(this.dir, 'data')
    fs.mkdirSync(dataDir, { recursive: true })
    this.gateway = startProcess(
      binary('openshell-gateway'),
      [
        '--listen', `127.0.0.1:${port}`,
        '--data-dir', dataDir,
        '--operator-token', `ci=${this.token}`,
        '--metrics-listen', 'off',
        '--config-delivery-mode', 'push',
        '--heartbeat-interval', '500ms',
      ],
      this.gatewayLog,
    )
    await waitForPort(port, this.gateway, this.gatewayLog)
    this.client = await Client.connect({ endpoint: this.endpoint, token: this.token })
  }

  /** Creates a sandbox through the SDK (with the example policy unless told) and saves its credential. */
  async sandbox(name, { workspace, policy = EXAMPLE_POLICY, supervisor = false, onApply } = {}) {
    const created = await this.client.createSandbox({ name, workspace, policy })
    const credentialFile = path.join(this.dir, `${name}.credential`)
    fs.writeFileSync(credentialFile, created.supervisorCredential, { mode: 0o600 })
    const sb = new TestSandbox(this, created, credentialFile)
    if (supervisor) sb.startSupervisor({ onApply })
    return sb
  }

  /** Logs of every process, for a failing test's message. */
  logs() {
    const parts = [`--- gateway\n${fs.readFileSync(this.gatewayLog, 'utf8')}`]
    for (const s of this.supervisors) parts.push(`--- ${path.basename(s.logFile)}\n${s.log()}`)
    return parts.join('\n')
  }

  async stop() {
    await Promise.all(this.supervisors.map((s) => s.stop()))
    if (this.gateway) await stopProcess(this.gateway)
    if (!process.env.OPENSHELL_KEEP_TEST_DIRS) fs.rmSync(this.dir, { recursive: true, force: true })
  }
}
