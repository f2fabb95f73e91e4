// Reads Chrome traces with speedscope's own importer (npm package `speedscope`, a reader nobody
// here wrote), as its web page does when a file is dropped on it.
//
//   node speedscope_import.js <speedscope package dir> [--expect NAME]... FILE...
//
// speedscope ships as one browser bundle without exports. This script loads that bundle in a
// node `vm` context whose browser objects are inert stand-ins, after adding one statement to it
// that hands out the bundle's import module (the one that exports importProfileGroupFromText)
// and the function that initialises that module; the bundle's own start-up of the user interface
// then fails on the stand-ins, which does not matter. Both names are found by the shape of the
// bundle's text, not by their minified names; a bundle where they cannot be found is an error
// that says so (a newer speedscope may need this script adapted).
//
// For each file: importProfileGroupFromText(file name, text) must return a group with a profile
// per thread, each of positive total weight, no warning may be printed while importing
// (speedscope warns when events do not nest: "Tried to end ... when ... was on the top of the
// stack"), and every NAME must be the name of some frame. Prints a line per file; exit status 1 on
// any failure.
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

function usage() {
  console.error('usage: node speedscope_import.js <speedscope package dir> [--expect NAME]... FILE...');
  process.exit(2);
}

const args = process.argv.slice(2);
if (args.length < 2) usage();
const packageDir = args.shift();
const expected = [];
const files = [];
while (args.length > 0) {
  const arg = args.shift();
  if (arg === '--expect' && args.length > 0) expected.push(args.shift());
  else files.push(arg);
}
if (files.length === 0) usage();

function loadImporter(dir) {
  const release = path.join(dir, 'dist', 'release');
  const bundleName = fs.readdirSync(release).find((f) => /^speedscope-.*\.js$/.test(f));
  if (!bundleName) throw new Error(`no speedscope-*.js bundle in ${release}`);
  let src = fs.readFileSync(path.join(release, bundleName), 'utf8');
  // `$l(kf,{...,importProfileGroupFromText:()=>Oy,...})`: the import module's export object.
  const moduleMatch = src.match(/([\w$]+)\(([\w$]+),\{[^}]*importProfileGroupFromText:\(\)=>/);
  if (!moduleMatch) throw new Error(`${bundleName}: the import module was not found`);
  const moduleName = moduleMatch[2].replace(/\$/g, '\\$');
  // `Promise.resolve().then(()=>(Sf(),kf));`: its lazy initialiser, run where the page loads it.
  const initMatch = src.match(
    new RegExp(`Promise\\.resolve\\(\\)\\.then\\(\\(\\)=>\\(([\\w$]+)\\(\\),${moduleName}\\)\\);`));
  if (!initMatch) throw new Error(`${bundleName}: the import module's initialiser was not found`);
  const at = initMatch.index + initMatch[0].length;
  src = src.slice(0, at) +
      `globalThis.__speedscopeImport={init:${initMatch[1]},module:${moduleMatch[2]}};` +
      src.slice(at);

  const inert = new Proxy(function () {}, {
    get: (target, key) => (key === Symbol.toPrimitive ? () => '' : inert),
    apply: () => inert,
    construct: () => inert,
  });
  const context = {
    console, setTimeout, clearTimeout, setInterval, clearInterval, queueMicrotask, Promise, URL,
    TextDecoder, TextEncoder, Uint8Array, ArrayBuffer, DataView, WebAssembly, atob, btoa,
    document: inert, localStorage: inert, navigator: {userAgent: 'node'},
    location: {hash: '', search: '', href: 'file:///', protocol: 'file:'},
    addEventListener: () => {}, requestAnimationFrame: () => 0,
    matchMedia: () => ({matches: false, addEventListener() {}, addListener() {}}),
  };
  context.window = context;
  context.self = context;
  vm.createContext(context);
  try {
    vm.runInContext(src, context, {filename: bundleName});
  } catch (e) {
    // The user interface's start-up, after the statement added above.
  }
  if (!context.__speedscopeImport) throw new Error(`${bundleName}: the import module was not reached`);
  context.__speedscopeImport.init();
  return {version: bundleName, importText: context.__speedscopeImport.module.importProfileGroupFromText};
}

async function main() {
  const importer = loadImporter(packageDir);
  let failed = false;
  for (const file of files) {
    const text = fs.readFileSync(file, 'utf8');
    const warnings = [];
    const saved = {log: console.log, warn: console.warn, error: console.error};
    console.log = () => {};  // "Importing as Trace Event Format profile"
    console.warn = (...m) => warnings.push(m.join(' '));
    console.error = (...m) => warnings.push(m.join(' '));
    let group = null;
    let error = null;
    try {
      group = await importer.importText(path.basename(file), text);
    } catch (e) {
      error = e;
    } finally {
      Object.assign(console, saved);
    }
    const problems = [];
    if (error) problems.push(`import failed: ${error.message}`);
    else if (!group || group.profiles.length === 0) problems.push('speedscope found no profile');
    const frames = new Set();
    let calls = 0;
    for (const profile of group ? group.profiles : []) {
      if (!(profile.getTotalWeight() > 0)) problems.push(`profile ${profile.getName()} is empty`);
      // Frame names are "<name> <args as JSON>": keep the name.
      profile.forEachFrame((frame) => frames.add(frame.name.replace(/ \{.*$/, '')));
      profile.forEachCall(() => { ++calls; }, () => {});
    }
    for (const w of warnings) problems.push(`warning: ${w.slice(0, 300)}`);
    for (const name of expected) {
      if (!frames.has(name)) problems.push(`no frame named ${name}`);
    }
    const profiles = group ? group.profiles.map((p) => p.getName()).join('; ') : '';
    console.log(`${file}: ${calls} calls, ${frames.size} operators in ${profiles}` +
                (problems.length ? ':' : ''));
    for (const p of problems) console.log(`  ${p}`);
    failed = failed || problems.length > 0;
  }
  console.log(`(read with ${importer.version})`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(`speedscope_import.js: ${e.message}`);
  process.exit(1);
});
