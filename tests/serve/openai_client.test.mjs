// `deltafin serve` through the official OpenAI client: streamed and non-streamed chat and
// completions return exactly `deltafin run`'s text (greedy, with the bundled draft model and
// without; sampled with a seed), the receipt's ids hash as system_fingerprint, usage that counts
// the ids, a follow-up turn that reuses the session, and the Kimi K2 chat template (fixture).
// Usage: node openai_client.test.mjs DELTAFIN_BINARY BUNDLED_MODEL_DIR K2_FIXTURE_DIR
import { test, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { startServer, runCli } from "./harness.mjs";

const [binary, bundled, k2Fixture] = process.argv.slice(2);
// --draft auto: the bundled draft model. A long --request-timeout: the client keeps its connection
// alive across tests while each test runs the CLI (slow under sanitizers), and a server closing the
// idle connection meanwhile would fail the next request with a connection error (maxRetries: 0).
const server = await startServer(binary, ["-m", bundled, "--request-timeout", "600"]);
after(async () => assert.equal(await server.stop(), 0));
const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });

const system = "You write Python.";
const user = "def fibonacci(n):";
const chatRun = runCli(binary, ["-m", bundled, "--chat", "--system", system, "-p", user, "-n", "24"]);

async function streamText(stream) {
  let text = "";
  const chunks = [];
  for await (const chunk of stream) {
    chunks.push(chunk);
    for (const choice of chunk.choices) text += choice.delta ? (choice.delta.content ?? "") : choice.text;
  }
  return { text, chunks };
}

test("the model list names the served model", async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ["default"]);
});

test("greedy chat equals `deltafin run --chat`, with the receipt's ids hash", async () => {
  assert.equal(runCli(binary, ["-m", bundled, "--chat", "--system", system, "-p", user, "-n", "24", "--draft", "off"]).text,
               chatRun.text);  // speculation does not change the tokens
  assert.ok(chatRun.text.length > 0);
  const r = await client.chat.completions.create({
    model: "default", temperature: 0, max_tokens: 24,
    messages: [{ role: "system", content: system }, { role: "user", content: user }],
  });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(r.choices[0].message.content, chatRun.text);
  assert.equal(r.system_fingerprint, chatRun.hash);
  assert.equal(r.usage.completion_tokens, chatRun.ids);
  assert.equal(r.choices[0].finish_reason, chatRun.ids === 24 ? "length" : "stop");
});

test("streamed chat sends the same text, then the usage", async () => {
  const stream = await client.chat.completions.create({
    model: "default", temperature: 0, max_completion_tokens: 24, stream: true, stream_options: { include_usage: true },
    messages: [{ role: "system", content: system }, { role: "user", content: user }],
  });
  const { text, chunks } = await streamText(stream);
  assert.equal(text, chatRun.text);
  assert.equal(chunks[0].choices[0].delta.role, "assistant");
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, chatRun.ids);
  assert.equal(last.system_fingerprint, chatRun.hash);
  assert.ok(chunks.at(-2).choices[0].finish_reason);
});

test("a stop string ends the text as `deltafin run --stop` does", async () => {
  const stop = chatRun.text.slice(6, 9);
  const expected = runCli(binary, ["-m", bundled, "--chat", "--system", system, "-p", user, "-n", "24", "--stop", stop]);
  const r = await client.chat.completions.create({
    model: "default", temperature: 0, max_tokens: 24, stop: [stop],
    messages: [{ role: "system", content: system }, { role: "user", content: user }],
  });
  assert.equal(r.choices[0].message.content, expected.text);
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.ok(r.choices[0].message.content.length < chatRun.text.length);
});

test("sampled chat with a seed equals `deltafin run --temp --seed` (no drafter)", async () => {
  const expected = runCli(binary, ["-m", bundled, "--chat", "-p", user, "-n", "20", "--temp", "0.8", "--seed", "7", "--draft", "off"]);
  const r = await client.chat.completions.create({
    model: "default", temperature: 0.8, seed: 7, max_tokens: 20, messages: [{ role: "user", content: user }],
  });
  assert.equal(r.choices[0].message.content, expected.text);
  assert.equal(r.system_fingerprint, expected.hash);
});

test("completions, plain and streamed, equal `deltafin run -p`", async () => {
  const prompt = "import os\nimport sys\n\n";
  const expected = runCli(binary, ["-m", bundled, "-p", prompt, "-n", "20"]);
  const r = await client.completions.create({ model: "default", prompt, max_tokens: 20, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices[0].text, expected.text);
  assert.equal(r.system_fingerprint, expected.hash);
  assert.equal(r.usage.completion_tokens, expected.ids);
  const { text } = await streamText(await client.completions.create({ model: "default", prompt, max_tokens: 20, temperature: 0, stream: true }));
  assert.equal(text, expected.text);
});

test("a follow-up turn reuses the session and still equals `deltafin run`", async () => {
  const messages = [{ role: "system", content: system }, { role: "user", content: user }];
  const first = await client.chat.completions.create({ model: "default", temperature: 0, max_tokens: 24, messages });
  messages.push({ role: "assistant", content: first.choices[0].message.content }, { role: "user", content: "Now in C." });
  const second = await client.chat.completions.create({ model: "default", temperature: 0, max_tokens: 24, messages });
  // The bundled model has no chat tokens: the conversation is a plain transcript (docs/serving.md).
  const transcript = `System: ${system}\n\nUser: ${user}\n\nAssistant: ${first.choices[0].message.content}\n\nUser: Now in C.\n\nAssistant:`;
  const expected = runCli(binary, ["-m", bundled, "-p", transcript, "-n", "24"]);
  assert.equal(second.choices[0].message.content, expected.text);
  assert.equal(second.usage.prompt_tokens > first.usage.prompt_tokens, true);
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1,
            `cached ${second.usage.prompt_tokens_details.cached_tokens} of ${second.usage.prompt_tokens}`);
});

test("the Kimi K2 chat template (fixture model) equals `deltafin run --chat`", async () => {
  const k2 = await startServer(binary, ["-m", k2Fixture]);
  try {
    const k2Client = new OpenAI({ baseURL: `${k2.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const expected = runCli(binary, ["-m", k2Fixture, "--chat", "--system", "Be brief.", "-p", "hello", "-n", "12"]);
    const r = await k2Client.chat.completions.create({
      model: "k2_tiny", temperature: 0, max_tokens: 12,
      messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "hello" }],
    });
    assert.equal(r.choices[0].message.content, expected.text);
    assert.equal(r.system_fingerprint, expected.hash);
  } finally {
    assert.equal(await k2.stop(), 0);
  }
});
