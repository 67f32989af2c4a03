// Run by `host build` with node, over the job's modules in `build/js`, before componentize-js:
// each `import(...)` becomes `__jobhostImport(...)`, which rejects with a fixed message (see
// guest-sdk/js/refusals.js) where componentize-js's would trap the attempt; a static import of
// a Node.js built-in module, which no job has, fails the build naming it. The modules are
// read with componentize-js's own es-module-lexer (strings, comments and regular expressions
// are not imports). Arguments: componentize-js's `cli.js`, then the modules.

import { createRequire, isBuiltin } from 'node:module';
import { readFile, writeFile } from 'node:fs/promises';
import { basename, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const [cli, ...modules] = process.argv.slice(2);
const lexer = createRequire(resolve(cli)).resolve('es-module-lexer');
const { init, parse } = await import(pathToFileURL(lexer).href);
await init;

let refused = false;
for (const module of modules) {
  const source = await readFile(module, 'utf8');
  let imports;
  try {
    [imports] = parse(source, module);
  } catch {
    // Not a module the lexer reads: componentize-js reports it.
    continue;
  }
  let rewritten = '';
  let done = 0;
  for (const { t: kind, n: name, ss: start } of imports) {
    if (kind === 1 && name !== undefined && isBuiltin(name)) {
      console.error(
        `${basename(module)} imports \`${name}\`, which a job does not have: it runs in a sandbox, not in Node.js (files: use \`files\`; calls out: use \`links\`)`,
      );
      refused = true;
    } else if (kind === 2 && source.startsWith('import', start)) {
      rewritten += `${source.slice(done, start)}__jobhostImport`;
      done = start + 'import'.length;
    }
  }
  if (done > 0) await writeFile(module, rewritten + source.slice(done));
}
process.exit(refused ? 1 : 0);
