// Builds one istanbul coverage map of src/ and workers/ from raw V8 coverage of two compilations of
// the same sources: tsc's dist/src/*.js (host side) and esbuild's worker bundle
// dist/workers/child-bundle.cjs (which the loader dist/workers/child.cjs runs in every worker thread).
import fs from 'node:fs';
import path from 'node:path';
import { Report } from 'c8';

const BUNDLE_WRAPPER = '(function (exports, require, module, __filename, __dirname) {';

/**
 * The coverage map of our sources: the host-side map with the worker bundle's counts folded in.
 * Returns the c8 Report of the host side, whose run() writes the reports from the merged map.
 */
export async function coverageReport({ root, tempDirectory, reportsDirectory, reporter }) {
  const ours = [path.join(root, 'src') + path.sep, path.join(root, 'workers') + path.sep];
  // The loader runs the bundle inside this function wrapper (scripts/bundle-worker.mjs), so V8's
  // offsets in the bundle are shifted by its length.
  const loader = fs.readFileSync(path.join(root, 'dist/workers/child.cjs'), 'utf8');
  if (!loader.includes(`'${BUNDLE_WRAPPER}'`)) {
    throw new Error('dist/workers/child.cjs no longer wraps the bundle in BUNDLE_WRAPPER: update scripts/coverage-map.mjs');
  }
  const common = { extension: ['.js', '.cjs'], excludeAfterRemap: false, tempDirectory, resolve: root, mergeAsync: true };
  // `all` adds the files no isolate loaded, at 0%. The inspector page is a browser bundle: it runs
  // in Chromium, where no Node coverage is collected.
  const host = new Report({
    ...common,
    include: ['dist/src/**', 'dist/workers/**'],
    exclude: ['dist/src/inspect/page.js', 'dist/workers/*.cjs'],
    all: true,
    src: [path.join(root, 'dist')],
    reporter,
    reportsDirectory,
  });
  const worker = new Report({
    ...common,
    include: ['dist/workers/child-bundle.cjs'],
    wrapperLength: BUNDLE_WRAPPER.length,
    reporter: [],
    reportsDirectory,
  });
  const map = await host.getCoverageMapFromAllCoverageFiles();
  const bundled = await worker.getCoverageMapFromAllCoverageFiles();
  // The bundle also maps to the node_modules it inlines: only our sources are reported, and of those
  // only the ones with code (a file of types only compiles to `export {};`: nothing can run).
  const isOurs = (file) => ours.some((dir) => file.startsWith(dir));
  map.filter((file) => isOurs(file) && !typesOnly(root, file));
  bundled.filter(isOurs);
  for (const file of bundled.files()) {
    const extra = bundled.fileCoverageFor(file);
    // A file no host-side isolate loaded is there only as `all`'s empty placeholder.
    if (map.data[file] === undefined || map.data[file].data.all === true) map.data[file] = extra;
    else foldInto(map.data[file], extra);
  }
  return host;
}

/**
 * Adds the worker bundle's counts to the host-side compilation's record of a file. The host record
 * defines the file's lines, functions and branches: a bundle count lands on the host item of the
 * same line (lines, functions) or the same start and end lines at the nearest columns (branches; the
 * two source maps place a V8 block a few columns apart). A bundle item with no host counterpart is
 * an artefact of esbuild's code shape and is dropped, so the figures can only err low, never high.
 */
function foldInto(target, extra) {
  const data = target.data;
  const { statementMap, s, fnMap, f, branchMap, b } = extra.data;
  const statementOnLine = firstByLine(data.statementMap, (item) => item.start.line);
  for (const [key, count] of Object.entries(s)) {
    const host = statementOnLine.get(statementMap[key].start.line);
    if (host !== undefined) data.s[host] += count;
  }
  const functionOnLine = firstByLine(data.fnMap, (item) => item.loc.start.line);
  for (const [key, count] of Object.entries(f)) {
    const host = functionOnLine.get(fnMap[key].loc.start.line);
    if (host !== undefined) data.f[host] += count;
  }
  const taken = new Set();
  for (const [key, branch] of Object.entries(branchMap)) {
    const host = nearestBranch(data.branchMap, branch.locations[0], taken);
    if (host === undefined || data.b[host].length !== b[key].length) continue;
    taken.add(host);
    data.b[host] = data.b[host].map((count, index) => count + b[key][index]);
  }
}

function firstByLine(items, lineOf) {
  const byLine = new Map();
  for (const [key, item] of Object.entries(items)) if (!byLine.has(lineOf(item))) byLine.set(lineOf(item), key);
  return byLine;
}

function nearestBranch(branchMap, want, taken) {
  let best;
  let bestDistance = Infinity;
  for (const [key, candidate] of Object.entries(branchMap)) {
    const have = candidate.locations[0];
    if (taken.has(key) || have.start.line !== want.start.line || have.end.line !== want.end.line) continue;
    const distance = Math.abs(have.start.column - want.start.column) + Math.abs(have.end.column - want.end.column);
    if (distance < bestDistance) {
      best = key;
      bestDistance = distance;
    }
  }
  return best;
}

function typesOnly(root, file) {
  const compiled = path.join(root, 'dist', path.relative(root, file)).replace(/\.ts$/, '.js');
  if (!fs.existsSync(compiled)) return false;
  return fs.readFileSync(compiled, 'utf8').replace(/^\/\/.*$/gm, '').trim() === 'export {};';
}
