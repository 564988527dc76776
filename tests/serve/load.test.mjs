// A bounded load test of `deltafin serve`: 4 clients send 20 requests each at once (chat and
// completions, streamed and not, over 4 prompts); every response must be complete (200, a
// finish_reason, the usage), equal `deltafin run`'s text for its own prompt (the expected texts
// differ, so a response given to the wrong request would fail), and carry an id of its own; the
// server's peak memory stays within the budget it reports, and its resident memory after the 80
// requests is within kGrowthBytes of what it was after the first ones (nothing piles up).
// Usage: node load.test.mjs DELTAFIN_BINARY BUNDLED_MODEL_DIR
import { test, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer, runCli, residentBytes } from "./harness.mjs";

const [binary, bundled] = process.argv.slice(2);
const kClients = 4, kRequestsPerClient = 20, kMaxTokens = 12, kGrowthBytes = 16e6;
const prompts = ["def parse(line):\n", "class Stack:\n", "import json\n\n", "for i in range(10):\n"];

const server = await startServer(binary, ["-m", bundled]);
after(async () => assert.equal(await server.stop(), 0));
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });

const expected = prompts.map((p) => ({
  chat: runCli(binary, ["-m", bundled, "--chat", "-p", p, "-n", String(kMaxTokens)]).text,
  completion: runCli(binary, ["-m", bundled, "-p", p, "-n", String(kMaxTokens)]).text,
}));

async function one(clientIndex, requestIndex) {
  const k = (clientIndex + requestIndex) % prompts.length;
  const chat = requestIndex % 2 === 0, stream = requestIndex % 4 < 2;
  const common = { model: "default", temperature: 0, max_tokens: kMaxTokens };
  let text = "", finish = null, id = null, usage = null;
  if (chat) {
    const r = await client.chat.completions.create({ ...common, messages: [{ role: "user", content: prompts[k] }], stream,
                                                     ...(stream ? { stream_options: { include_usage: true } } : {}) });
    if (stream) {
      for await (const c of r) {
        id = c.id;
        usage = c.usage ?? usage;
        for (const choice of c.choices) text += choice.delta.content ?? "", finish = choice.finish_reason ?? finish;
      }
    } else {
      text = r.choices[0].message.content, finish = r.choices[0].finish_reason, id = r.id, usage = r.usage;
    }
  } else {
    const r = await client.completions.create({ ...common, prompt: prompts[k], stream,
                                                ...(stream ? { stream_options: { include_usage: true } } : {}) });
    if (stream) {
      for await (const c of r) {
        id = c.id;
        usage = c.usage ?? usage;
        for (const choice of c.choices) text += choice.text, finish = choice.finish_reason ?? finish;
      }
    } else {
      text = r.choices[0].text, finish = r.choices[0].finish_reason, id = r.id, usage = r.usage;
    }
  }
  return { k, chat, stream, text, finish, id, usage };
}

test(`${kClients} clients x ${kRequestsPerClient} requests: every response complete, correct and its own`, async () => {
  const texts = expected.flatMap((e) => [e.chat, e.completion]);
  assert.equal(new Set(texts).size, texts.length, "the expected texts must differ to tell responses apart");
  for (let i = 0; i < 4; ++i) await one(0, i);  // warm-up: each kind of request once
  const warm = residentBytes(server.pid);
  const started = Date.now();
  const results = (await Promise.all(Array.from({ length: kClients }, async (_, c) => {
    const mine = [];
    for (let i = 0; i < kRequestsPerClient; ++i) mine.push(await one(c, i));
    return mine;
  }))).flat();
  const seconds = (Date.now() - started) / 1000;
  assert.equal(results.length, kClients * kRequestsPerClient);
  for (const r of results) {
    const want = r.chat ? expected[r.k].chat : expected[r.k].completion;
    assert.equal(r.text, want, `prompt ${r.k} (${r.chat ? "chat" : "completion"}, ${r.stream ? "streamed" : "whole"})`);
    assert.ok(r.finish === "length" || r.finish === "stop");
    assert.ok(r.usage && r.usage.completion_tokens > 0 && r.usage.completion_tokens <= kMaxTokens);
  }
  assert.equal(new Set(results.map((r) => r.id)).size, results.length, "response ids must be unique");
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  const value = (name) => Number(metrics.match(new RegExp(`^${name} (\\S+)$`, "m"))[1]);
  const budget = value("deltafin_memory_budget_bytes");
  const resident = residentBytes(server.pid);
  const peak = resident ? resident.peak : value("deltafin_memory_peak_rss_bytes");
  assert.ok(peak <= budget, `peak RSS ${peak} above the budget ${budget}`);
  // Under a sanitizer (scripts/sanitize.sh) the runtime's own shadow and history memory grows with
  // every request: the growth bound is checked on the real build only.
  if (resident && !process.env.DELTAFIN_SANITIZER)
    assert.ok(resident.now - warm.now <= kGrowthBytes, `resident memory grew from ${warm.now} to ${resident.now}`);
  assert.equal(value("deltafin_generations_total"), results.length + 4);
  console.log(`load: ${results.length} requests in ${seconds.toFixed(2)} s (${(results.length / seconds).toFixed(1)} req/s); ` +
              `peak RSS ${(peak / 1e6).toFixed(1)} MB of a ${(budget / 1e6).toFixed(1)} MB budget; ` +
              (resident ? `resident ${(warm.now / 1e6).toFixed(1)} MB after warm-up, ${(resident.now / 1e6).toFixed(1)} MB after; ` : "") +
              `${value("deltafin_completion_tokens_total")} tokens generated`);
});
