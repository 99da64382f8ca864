// Differential check of qvl's tokenizer against the reference (the Rust `tokenizers` crate through
// its Node binding, the version that produced tests/fixtures/tokenizer). Not part of `make test`:
// the reference is an npm package a developer installs by hand (see docs/TOKENIZER.md).
//
//   npm install --prefix /tmp/tok-ref tokenizers@0.23.2
//   node tools/tokenizer_oracle.mjs /tmp/tok-ref TOKENIZER_JSON PROBES.hex OUT.txt
//
// PROBES.hex holds one UTF-8 string per line as hex; OUT.txt gets one line of space-separated ids
// per probe (tokenizer(text).input_ids, no special tokens added).
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const [prefix, tokJson, probes, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error('usage: node tools/tokenizer_oracle.mjs NPM_PREFIX TOKENIZER_JSON PROBES.hex OUT.txt');
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(prefix), 'node_modules', 'x.js'));
const { Tokenizer } = require('tokenizers');
const t = Tokenizer.fromFile(tokJson);
const lines = fs.readFileSync(probes, 'utf8').split('\n').filter((l) => l.length > 0);
const out = fs.openSync(outPath, 'w');
const B = 20000;
for (let i = 0; i < lines.length; i += B) {
  const batch = lines.slice(i, i + B).map((h) => Buffer.from(h, 'hex').toString('utf8'));
  const enc = await t.encodeBatch(batch, { addSpecialTokens: false });
  fs.writeSync(out, enc.map((e) => e.getIds().join(' ')).join('\n') + '\n');
}
fs.closeSync(out);
