// Tool calls, reasoning and structured output through the official OpenAI client, end to end on
// fixture models in the Kimi K2 and Kimi K3 chat formats (tool_models.mjs) and on the bundled
// model. The fixture models' weights are random, so they would never call a tool by themselves:
// the tool loop forces the call with tool_choice (a named function, or "required"), whose
// constrained decoding makes the target's greedy reply a well-formed call; the test answers it
// and the model continues. Structured output is validated against its schema with Ajv, an
// independent JSON Schema validator.
// Usage: node tools.test.mjs DELTAFIN_BINARY BUNDLED_MODEL_DIR FIXTURES_DIR
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import OpenAI from "openai";
import Ajv from "ajv";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startServer, runCli } from "./harness.mjs";
import { makeToolModel } from "./tool_models.mjs";

const [binary, bundled, fixtures] = process.argv.slice(2);
const ajv = new Ajv({ strict: false });

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather now in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 16 }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
      required: ["city", "unit"],
      additionalProperties: false,
    },
  },
};
const time = {
  type: "function",
  function: { name: "get_time", parameters: { type: "object", properties: { zone: { enum: ["CET", "UTC"] } }, required: ["zone"],
                                              additionalProperties: false } },
};

const servers = [];
after(async () => {
  for (const { server, dir } of servers) {
    assert.equal(await server.stop(), 0);
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
});

async function serve(model, dir) {
  const server = await startServer(binary, ["-m", model, "--model-name", "m", "--draft", "off", "--request-timeout", "600"]);
  servers.push({ server, dir });
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
}

function checkCall(call, tool) {
  assert.equal(call.type, "function");
  assert.equal(call.function.name, tool.function.name);
  assert.ok(call.id.length > 0);
  const args = JSON.parse(call.function.arguments);
  assert.ok(ajv.validate(tool.function.parameters, args), `${call.function.arguments}: ${ajv.errorsText()}`);
}

// The tool loop: the model is made to call get_weather, the test answers, the model continues.
async function toolLoop(client, extra = {}) {
  const messages = [{ role: "system", content: "You can look up the weather." }, { role: "user", content: "Weather in Paris?" }];
  // (Room for the random models' whitespace, bounded per gap: a forced reply ends once its call is written.)
  const request = { model: "m", temperature: 0, max_tokens: 800, tools: [weather, time], ...extra };
  const first = await client.chat.completions.create({
    ...request, messages, tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  const choice = first.choices[0];
  assert.equal(choice.finish_reason, "tool_calls");
  assert.ok(choice.message.tool_calls.length >= 1);  // (parallel calls allowed: each names get_weather)
  for (const call of choice.message.tool_calls) checkCall(call, weather);

  // Streamed, the official client's stream helper assembles the same call from the deltas.
  const stream = client.chat.completions.stream({
    ...request, messages, tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  const streamed = await stream.finalChatCompletion();
  assert.equal(streamed.choices[0].finish_reason, "tool_calls");
  assert.deepEqual(streamed.choices[0].message.tool_calls, choice.message.tool_calls);

  messages.push(choice.message);
  for (const call of choice.message.tool_calls)
    messages.push({ role: "tool", tool_call_id: call.id, content: JSON.stringify({ temperature: 21, unit: "celsius" }) });
  const second = await client.chat.completions.create({ ...request, messages, tool_choice: "none", max_tokens: 8 });
  assert.ok(["stop", "length"].includes(second.choices[0].finish_reason));
  assert.equal(second.choices[0].message.tool_calls, undefined);
  assert.equal(typeof second.choices[0].message.content, "string");
  // "required" with parallel calls off: exactly one call, to either tool.
  const required = await client.chat.completions.create({ ...request, messages, tool_choice: "required", parallel_tool_calls: false });
  assert.equal(required.choices[0].finish_reason, "tool_calls");
  assert.equal(required.choices[0].message.tool_calls.length, 1);
  const named = required.choices[0].message.tool_calls[0];
  checkCall(named, named.function.name === "get_weather" ? weather : time);
  return { first, second };
}

test("a tool loop with the official client on a Kimi K2-format model", async () => {
  const dir = makeToolModel(fixtures, "kimi-k2");
  const { first } = await toolLoop(await serve(dir, dir));
  // `deltafin run --chat --tools FILE --tool-choice NAME` makes the same call, printed as a JSON line.
  const tools = join(dir, "tools.json");
  writeFileSync(tools, JSON.stringify([weather, time]));
  const run = runCli(binary, ["-m", dir, "--draft", "off", "--chat", "--system", "You can look up the weather.",
                              "-p", "Weather in Paris?", "--tools", tools, "--tool-choice", "get_weather", "-n", "800"]);
  const calls = first.choices[0].message.tool_calls;
  const lines = run.text.split("\n").slice(-calls.length);
  assert.deepEqual(lines.map((line) => JSON.parse(line)), calls);
  assert.equal(run.hash, first.system_fingerprint);
});

test("a tool loop on a Kimi K3-format model, and its reasoning apart from the answer", async () => {
  const dir = makeToolModel(fixtures, "kimi-k3");
  const client = await serve(dir, dir);
  // Thinking off: the prompt opens the response block (a random model thinking would not stop).
  await toolLoop(client, { chat_template_kwargs: { thinking: false } });
  // Thinking on, the reply so far is reasoning (this model never closes its think block).
  const request = { model: "m", temperature: 0, max_tokens: 12, messages: [{ role: "user", content: "Why?" }] };
  const r = await client.chat.completions.create(request);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.ok(r.choices[0].message.reasoning_content.length > 0);
  assert.equal(r.choices[0].message.content, "");
  // (The official client's stream helper keeps only the last piece of fields it does not know,
  // like reasoning_content: the chunks are read here.)
  let reasoning = "";
  for await (const chunk of await client.chat.completions.create({ ...request, stream: true })) {
    const delta = chunk.choices[0]?.delta ?? {};
    assert.equal(delta.content ?? "", "");
    reasoning += delta.reasoning_content ?? "";
  }
  assert.equal(reasoning, r.choices[0].message.reasoning_content);
  const inline = await client.chat.completions.create({ ...request, reasoning_format: "inline" });
  assert.equal(inline.choices[0].message.content, "<think>" + r.choices[0].message.reasoning_content);
  assert.equal(inline.choices[0].message.reasoning_content, undefined);
});

test("structured output: json_schema and json_object replies parse and validate", async () => {
  const schema = {
    type: "object",
    properties: { name: { type: "string", maxLength: 20 }, age: { type: "integer" },
                  tags: { type: "array", items: { type: "string", maxLength: 8 }, maxItems: 3 },
                  mood: { enum: ["happy", "sad"] } },
    required: ["name", "age", "mood"],
    additionalProperties: false,
  };
  const dir = makeToolModel(fixtures, "kimi-k3");
  const clients = [await serve(bundled, null), await serve(dir, dir)];
  for (const client of clients) {
    for (const stream of [false, true]) {
      const request = {
        model: "m", temperature: 0, max_tokens: 800, messages: [{ role: "user", content: "Describe a person as JSON." }],
        chat_template_kwargs: { thinking: false },
        response_format: { type: "json_schema", json_schema: { name: "person", schema } },
      };
      let content;
      if (stream) content = (await client.chat.completions.stream(request).finalChatCompletion()).choices[0].message.content;
      else content = (await client.chat.completions.create(request)).choices[0].message.content;
      const value = JSON.parse(content);
      assert.ok(ajv.validate(schema, value), `${content}: ${ajv.errorsText()}`);
    }
  }
  // json_object: any object (unbounded, so only on the trained bundled model, which closes it).
  const object = await clients[0].chat.completions.create({
    model: "m", temperature: 0, max_tokens: 400, messages: [{ role: "user", content: "JSON please" }],
    response_format: { type: "json_object" },
  });
  assert.equal(object.choices[0].finish_reason, "stop");
  const value = JSON.parse(object.choices[0].message.content);
  assert.equal(typeof value, "object");
  assert.ok(!Array.isArray(value));
  // The masking cost is counted (docs/structured-output.md).
  const metrics = await (await fetch(clients[0].baseURL.replace(/\/v1$/, "/metrics"))).text();
  assert.ok(Number(metrics.match(/^deltafin_constrained_tokens_total (\d+)$/m)[1]) > 0, metrics);
  assert.ok(Number(metrics.match(/^deltafin_constraint_seconds_total ([0-9.]+)$/m)[1]) > 0);
});
