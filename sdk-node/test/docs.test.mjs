// Runs the examples of docs/sdk-node.md against a real gateway, so the doc
// cannot promise what the SDK does not do.
//
// A ```js or ```ts block preceded by `<!-- test -->` is an example;
// `<!-- test:prelude -->` marks the connect example, which runs alone and is
// prepended to every other one (they use its `client`). `expect="REGEX"` names
// output the example must print. Each runs as its own ES module in a scratch
// directory holding `policy.yaml` and a node_modules link to the package under
// test (this one, or OPENSHELL_SDK_PACKAGE's), as a user's would. A ```ts
// example is first compiled with `tsc --strict` against that package's
// types, then its output runs; every ```ts block must be an example.
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { after, before, test } from 'node:test'
import { promisify } from 'node:util'

import { Harness, SDK_DIR, SDK_PACKAGE, policyWithPort } from './harness.mjs'

const run = promisify(execFile)
const DOCS = path.join(SDK_DIR, '..', 'docs')
const DOC = path.join(DOCS, 'sdk-node.md')
const TSC = path.join(SDK_DIR, 'node_modules', 'typescript', 'bin', 'tsc')

function examples(markdown) {
  const found = []
  const marker = /<!--\s*test(:prelude)?(?:\s+expect="([^"]*)")?\s*-->\s*\n```(js|ts)\n([\s\S]*?)\n```/g
  for (const match of markdown.matchAll(marker)) {
    const line = markdown.slice(0, match.index).split('\n').length
    found.push({ prelude: Boolean(match[1]), expect: match[2], lang: match[3], code: match[4], line })
  }
  return found
}

const markdown = fs.readFileSync(DOC, 'utf8')
const blocks = examples(markdown)
const prelude = blocks.find((b) => b.prelude)

/** Compiles a TypeScript example under --strict; returns the emitted module. */
async function compile(file) {
  const outDir = path.join(path.dirname(file), 'ts-out')
  const args = [
    TSC,
    '--strict',
    '--target', 'es2022',
    '--module', 'nodenext',
    '--moduleResolution', 'nodenext',
    '--types', 'node',
    '--typeRoots', path.join(SDK_DIR, 'node_modules', '@types'),
    '--outDir', outDir,
    file,
  ]
  try {
    await run(process.execPath, args, { cwd: path.dirname(file) })
  } catch (err) {
    assert.fail(`tsc --strict failed:\n${err.stdout}${err.stderr}`)
  }
  return path.join(outDir, path.basename(file).replace(/\.mts$/, '.mjs'))
}

let h
let workdir
before(async () => {
  h = await Harness.start()
  await h.sandbox('demo', { supervisor: true })
  await h.sandbox('idle', { workspace: 'staging' })
  workdir = fs.mkdtempSync(path.join(h.dir, 'docs-'))
  fs.writeFileSync(path.join(workdir, 'policy.yaml'), policyWithPort(8443))
  const scope = path.join(workdir, 'node_modules', '@openshell')
  fs.mkdirSync(scope, { recursive: true })
  fs.symlinkSync(SDK_PACKAGE, path.join(scope, 'sdk'), 'dir')
})
after(async () => {
  await h?.stop()
})

test('the doc has a prelude and examples for each documented flow', () => {
  assert.ok(prelude, 'a <!-- test:prelude --> block')
  assert.ok(blocks.length >= 6, `found ${blocks.length} examples`)
  const typescript = [...markdown.matchAll(/^```ts$/gm)].length
  assert.ok(typescript >= 1, 'a TypeScript example')
  assert.equal(blocks.filter((b) => b.lang === 'ts').length, typescript, 'every ```ts block is an example')
})

// Keys are unique per target and caller: two examples (of this guide or of
// another SDK's) sending one key with different requests would fail whichever
// runs second against the same gateway.
test('every idempotency key of the SDK guides belongs to one example', () => {
  const seen = new Map()
  for (const guide of fs.readdirSync(DOCS).filter((f) => /^sdk-.*\.md$/.test(f))) {
    const text = fs.readFileSync(path.join(DOCS, guide), 'utf8')
    const key = /(?:idempotencyKey:|idempotency_key=|\bkey = |\.idempotency_key\()\s*["']([^"']+)["']/g
    for (const match of text.matchAll(key)) {
      const where = `${guide}:${text.slice(0, match.index).split('\n').length}`
      assert.ok(!seen.has(match[1]), `idempotency key ${match[1]} at ${where} is also used at ${seen.get(match[1])}`)
      seen.set(match[1], where)
    }
  }
  assert.ok(seen.size >= 2, `found ${seen.size} keys; did the guides' spelling change?`)
})

for (const [i, block] of blocks.entries()) {
  test(`docs/sdk-node.md example at line ${block.line}`, async (t) => {
    const code = block.prelude ? block.code : `${prelude.code}\n\n${block.code}`
    let file = path.join(workdir, `example-${i}.${block.lang === 'ts' ? 'mts' : 'mjs'}`)
    fs.writeFileSync(file, `${code}\n`)
    if (block.lang === 'ts') file = await compile(file)
    let out
    try {
      out = await run(process.execPath, [file], {
        cwd: workdir,
        env: { ...process.env, OPENSHELL_GATEWAY: h.endpoint, OPENSHELL_TOKEN: h.token },
        timeout: 120_000,
      })
    } catch (err) {
      assert.fail(`example failed (exit ${err.code}):\n${err.stdout}\n${err.stderr}\n${h.logs()}`)
    }
    t.diagnostic(out.stdout.trim())
    if (block.expect) assert.match(out.stdout, new RegExp(block.expect))
  })
}
