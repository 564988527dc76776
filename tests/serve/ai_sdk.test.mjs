// A second widely used client library against `deltafin serve`: the Vercel AI SDK (npm `ai` with
// its OpenAI-compatible provider), whose agent loop calls a tool the model asks for and sends the
// result back. On the Kimi K2-format fixture model (tool_models.mjs: random weights, so the first
// step forces the call with toolChoice, and the second forbids one), non-streamed and streamed.
// Usage: node ai_sdk.test.mjs DELTAFIN_BINARY FIXTURES_DIR
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { generateText, streamText, tool, jsonSchema, stepCountIs } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import Ajv from "ajv";
import { startServer } from "./harness.mjs";
import { makeToolModel } from "./tool_models.mjs";

const [binary, fixtures] = process.argv.slice(2);
const dir = makeToolModel(fixtures, "kimi-k2");
const server = await startServer(binary, ["-m", dir, "--model-name", "m", "--draft", "off", "--request-timeout", "600"]);
after(async () => {
  assert.equal(await server.stop(), 0);
  rmSync(dir, { recursive: true, force: true });
});
const model = createOpenAICompatible({ name: "deltafin", baseURL: `${server.url}/v1`, apiKey: "unused" })("m");

const parameters = { type: "object", properties: { city: { type: "string", maxLength: 16 } }, required: ["city"], additionalProperties: false };
const validate = new Ajv().compile(parameters);
const calls = [];
const tools = {
  get_weather: tool({
    description: "The weather now in a city",
    inputSchema: jsonSchema(parameters),
    execute: async (input) => {
      calls.push(input);
      return { celsius: 21 };
    },
  }),
};
const request = {
  model, tools, temperature: 0, maxOutputTokens: 600, prompt: "Weather in Paris?", stopWhen: stepCountIs(2),
  prepareStep: ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? { type: "tool", toolName: "get_weather" } : "none" }),
};

test("the AI SDK's agent loop: the model calls the tool, gets the result, and answers", async () => {
  calls.length = 0;
  const r = await generateText(request);
  assert.equal(r.steps.length, 2);
  assert.equal(r.steps[0].finishReason, "tool-calls");
  assert.equal(r.steps[0].toolCalls.length, 1);
  const call = r.steps[0].toolCalls[0];
  assert.equal(call.toolName, "get_weather");
  assert.equal(call.toolCallId, "functions.get_weather:0");
  assert.ok(validate(call.input), JSON.stringify(call.input));
  assert.deepEqual(calls, [call.input]);
  assert.deepEqual(r.steps[0].toolResults[0].output, { celsius: 21 });
  assert.ok(["stop", "length"].includes(r.steps[1].finishReason));
  assert.equal(typeof r.text, "string");
});

test("streamed, the SDK assembles the same call from the deltas", async () => {
  calls.length = 0;
  const whole = await generateText(request);
  calls.length = 0;
  const parts = [];
  for await (const part of streamText(request).fullStream) if (part.type === "tool-call") parts.push(part);
  assert.equal(parts.length, 1);
  assert.deepEqual(parts[0].input, whole.steps[0].toolCalls[0].input);
  assert.equal(parts[0].toolCallId, whole.steps[0].toolCalls[0].toolCallId);
  assert.equal(calls.length, 1);
});
