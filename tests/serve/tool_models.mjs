// Fixture models in each chat family's format with the tool tokens, for the tool-call tests: the
// golden fixtures' tiny checkpoints (k2_tiny: Kimi K2 / DeepSeek-V3 architecture; k3_tiny: Kimi
// K3), 320 tokens each, with k2_tiny's byte-level tiktoken ranks and a tokenizer_config.json that
// names the family's control tokens (K2's real ids are 163584+; here they take the unused ids
// 296..319), and a context of at least 4,096 positions. Their weights are random, so what they say is noise: the tests drive tool calls with
// tool_choice, whose constrained decoding makes the greedy reply a well-formed call.
import { mkdtempSync, writeFileSync, copyFileSync, symlinkSync, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const kSpecials = {
  "kimi-k2": ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
              "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
              "<|tool_call_argument_begin|>", "<|tool_call_end|>"],
  "kimi-k2-thinking": ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
                       "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                       "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<think>", "</think>"],
  "kimi-k3": ["[BOS]", "[EOS]", "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"],
};

// Makes the model directory for `style` ("kimi-k2", "kimi-k2-thinking", "kimi-k3") under a new
// temporary directory; returns its path.
export function makeToolModel(fixtures, style) {
  const dir = mkdtempSync(join(tmpdir(), `deltafin-${style}-`));
  const source = resolve(fixtures, style === "kimi-k3" ? "k3_tiny" : "k2_tiny");
  for (const f of readdirSync(source))
    if (f.endsWith(".safetensors") || f.endsWith(".index.json")) symlinkSync(join(source, f), join(dir, f));
  // k2_tiny's context is 512 positions, less than a prompt that declares tools in a byte-level
  // vocabulary: its copy gets 4,096 (the YaRN frequencies depend on the original context, not this).
  const config = JSON.parse(readFileSync(join(source, "config.json"), "utf8"));
  if (config.max_position_embeddings) config.max_position_embeddings = Math.max(config.max_position_embeddings, 4096);
  writeFileSync(join(dir, "config.json"), JSON.stringify(config, null, 2));
  copyFileSync(join(fixtures, "k2_tiny", "tiktoken.model"), join(dir, "tiktoken.model"));
  const added = {};
  kSpecials[style].forEach((content, i) => {
    added[String(296 + i)] = { content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: true };
  });
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify({
    added_tokens_decoder: added, bos_token: "[BOS]", eos_token: "[EOS]", tokenizer_class: "TikTokenTokenizer", model_max_length: 4096,
  }, null, 2));
  return dir;
}

// node tool_models.mjs FIXTURES STYLE: makes one and prints its path (for trying it by hand).
if (import.meta.url === `file://${process.argv[1]}`) console.log(makeToolModel(process.argv[2], process.argv[3]));
