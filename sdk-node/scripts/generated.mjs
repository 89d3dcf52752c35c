// Renders native.js and native.d.ts from the type-def fragments napi-derive
// writes while cargo compiles this crate, and compares them with the
// committed files (or, with --write, replaces them).
//
//   node scripts/generated.mjs [--typedefs DIR] [--write]
//
// DIR is the NAPI_TYPE_DEF_TMP_FOLDER a workspace build already ran with
// (test.sh passes the one of its build). Without it, this runs that build
// itself: `cargo build --workspace --bins --lib`, the package selection of
// scripts/test.sh, so it reuses every compiled dependency and recompiles only
// this crate. Rendering uses @napi-rs/cli's own typegen and loader writer with
// the options of `npm run build`, so the result is what that command writes,
// without its separate cargo build under a --target directory of its own,
// which would recompile every dependency.

import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

import { generateTypeDef, readNapiConfig, writeJsBinding } from '@napi-rs/cli'

const SDK_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

// What `npm run build` passes to `napi build`; checked against package.json
// below so the two cannot disagree silently.
const BUILD_SCRIPT = 'napi build --platform --no-const-enum --js native.js --dts native.d.ts'
const JS_FILE = 'native.js'
const DTS_FILE = 'native.d.ts'
const CRATE = 'openshell-sdk-node'

// Temporary folders, removed on every exit, including fail()'s.
const scratch = []
process.on('exit', () => {
  for (const dir of scratch) fs.rmSync(dir, { recursive: true, force: true })
})

function fail(message) {
  console.error(`generated.mjs: ${message}`)
  process.exit(1)
}

const { values } = parseArgs({
  options: { typedefs: { type: 'string' }, write: { type: 'boolean', default: false } },
})
let typedefs = values.typedefs
if (typedefs === undefined) {
  // A new folder each time: napi-build reruns this crate's build script when
  // the variable changes, so cargo recompiles the crate and napi-derive
  // writes every fragment afresh.
  typedefs = fs.mkdtempSync(path.join(os.tmpdir(), 'openshell-sdk-node-typedefs-'))
  scratch.push(typedefs)
  const build = spawnSync('cargo', ['build', '--workspace', '--bins', '--lib'], {
    cwd: path.join(SDK_DIR, '..'),
    env: { ...process.env, NAPI_TYPE_DEF_TMP_FOLDER: typedefs },
    stdio: 'inherit',
  })
  if (build.status !== 0) fail('cargo build failed')
}

const packageJsonPath = path.join(SDK_DIR, 'package.json')
const packageJson = JSON.parse(fs.readFileSync(packageJsonPath, 'utf8'))
if (packageJson.scripts?.build !== BUILD_SCRIPT) {
  fail(`package.json's build script is not \`${BUILD_SCRIPT}\`; update scripts/generated.mjs to render what it writes`)
}

// An empty or missing fragment would render a native.d.ts without any export,
// which must not pass as "regenerated": it means the crate was not compiled
// with the folder set.
const fragment = path.join(typedefs, CRATE)
if (!fs.existsSync(fragment) || fs.statSync(fragment).size === 0) {
  fail(`no type-def fragment at ${fragment}: compile ${CRATE} with NAPI_TYPE_DEF_TMP_FOLDER=${typedefs}`)
}

const config = await readNapiConfig(packageJsonPath)
const out = fs.mkdtempSync(path.join(os.tmpdir(), 'openshell-sdk-node-generated-'))
scratch.push(out)
const { exports, dts } = await generateTypeDef({
  typeDefDir: typedefs,
  constEnum: false,
  cwd: SDK_DIR,
  // `--platform` writes the root loader, which declares this export.
  declareBindingTarget: (idents) => idents.length > 0,
})
fs.writeFileSync(path.join(out, DTS_FILE), dts)
await writeJsBinding({
  platform: true,
  idents: exports,
  jsBinding: JS_FILE,
  binaryName: config.binaryName,
  packageName: config.packageName,
  version: config.packageJson.version,
  outputDir: out,
  wasiFlavors: [],
})

const stale = []
for (const file of [JS_FILE, DTS_FILE]) {
  const committed = path.join(SDK_DIR, file)
  const generated = path.join(out, file)
  if (fs.existsSync(committed) && fs.readFileSync(committed, 'utf8') === fs.readFileSync(generated, 'utf8')) {
    continue
  }
  if (values.write) {
    fs.copyFileSync(generated, committed)
    console.log(`generated.mjs: wrote ${file}`)
    continue
  }
  stale.push(file)
  const diff = spawnSync('diff', ['-u', '--label', `${file} (committed)`, '--label', `${file} (from src/)`, committed, generated], {
    encoding: 'utf8',
  })
  process.stderr.write(diff.stdout || diff.stderr || `${file} differs\n`)
}
if (stale.length > 0) {
  fail(
    `${stale.join(' and ')} ${stale.length > 1 ? 'do' : 'does'} not match the Rust source in src/ (diff above). ` +
      'Regenerate them with `npm run generate` in sdk-node (or `npm run build`) and commit the result.',
  )
}
if (!values.write) console.log(`generated.mjs: ${JS_FILE} and ${DTS_FILE} match src/`)
