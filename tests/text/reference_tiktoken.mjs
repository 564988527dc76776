// Reference outputs for the C++ tiktoken tokenizer, from js-tiktoken (o200k_base).
// Usage: node tests/text/reference_tiktoken.mjs OUT_DIR
// Writes OUT_DIR/o200k_base.tiktoken (standard "<base64 bytes> <rank>" lines, sorted by rank) and
// OUT_DIR/o200k_ids.json: one entry per corpus string (tests/fixtures/text/corpus.json), the ids of
// js-tiktoken's o200k_base encode(text) with no special tokens allowed or disallowed (special-token
// text such as "<|endoftext|>" is encoded as ordinary text), or null for the strings listed in
// corpus_invalid.json (invalid UTF-8: a JS string cannot carry them).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Tiktoken } from "js-tiktoken/lite";
import o200k from "js-tiktoken/ranks/o200k_base";

const here = path.dirname(fileURLToPath(import.meta.url));
const fixtures = path.resolve(here, "..", "fixtures", "text");
const outDir = process.argv[2];
if (!outDir) {
  console.error("usage: node tests/text/reference_tiktoken.mjs OUT_DIR");
  process.exit(2);
}
fs.mkdirSync(outDir, { recursive: true });

// (a) The ranks as a .tiktoken file. bpe_ranks lines are "<first-char> <offset> <base64> <base64> ...".
const ranks = [];
for (const line of o200k.bpe_ranks.split("\n")) {
  if (!line) continue;
  const [, offsetStr, ...tokens] = line.split(" ");
  const offset = Number.parseInt(offsetStr, 10);
  tokens.forEach((tok, i) => ranks.push([offset + i, tok]));
}
ranks.sort((a, b) => a[0] - b[0]);
const seen = new Set();
for (const [rank] of ranks) {
  if (seen.has(rank)) throw new Error(`duplicate rank ${rank}`);
  seen.add(rank);
}
fs.writeFileSync(path.join(outDir, "o200k_base.tiktoken"), ranks.map(([r, t]) => `${t} ${r}\n`).join(""));

// (b) The ids of every valid corpus string. Passing disallowedSpecial = [] (and no allowed specials)
// makes encode() treat special-token text as ordinary text instead of throwing.
const enc = new Tiktoken(o200k);
const corpus = JSON.parse(fs.readFileSync(path.join(fixtures, "corpus.json"), "utf8"));
const invalid = new Set(JSON.parse(fs.readFileSync(path.join(fixtures, "corpus_invalid.json"), "utf8")));
const decoder = new TextDecoder("utf-8", { fatal: true });
const out = corpus.map((b64, i) => {
  if (invalid.has(i)) return null;
  const text = decoder.decode(Buffer.from(b64, "base64"));
  return enc.encode(text, [], []);
});
fs.writeFileSync(path.join(outDir, "o200k_ids.json"), JSON.stringify(out));
console.log(`${ranks.length} ranks, ${out.filter((x) => x !== null).length} encoded strings -> ${outDir}`);
