// The tool formats, type-checked against the vendors' own SDK types: a
// request body built from dshd's tool definitions must compile as the
// vendor's request type (tsc runs before these tests), and the real server
// must answer each format with definitions of that shape.
import { test } from "node:test";
import assert from "node:assert/strict";
import type OpenAI from "openai";
import type Anthropic from "@anthropic-ai/sdk";
import { createDshdClient, listTools, must, type Schemas } from "../src/index.js";

// Compile-time checks: the contract's types are the vendors' types.
export function chatCompletionsBody(tools: Schemas["OpenAIChatTool"][]): OpenAI.Chat.ChatCompletionCreateParams {
  return { model: "any", messages: [{ role: "user", content: "hi" }], tools };
}
export function responsesBody(tools: Schemas["OpenAIResponsesTool"][]): OpenAI.Responses.ResponseCreateParams {
  return { model: "any", input: "hi", tools };
}
export function anthropicMessagesBody(tools: Schemas["AnthropicTool"][]): Anthropic.MessageCreateParams {
  return { model: "any", max_tokens: 1024, messages: [{ role: "user", content: "hi" }], tools };
}

const c = createDshdClient(process.env.DSHD_URL!, process.env.DSHD_TOKEN!);

test("openai: Chat Completions function tools", async () => {
  const tools = await listTools(c.api, "openai");
  const body = chatCompletionsBody(tools);
  assert.deepEqual(body.tools!.map((t) => (t.type === "function" ? t.function.name : "")), ["bash", "job_output", "job_list", "job_kill", "write_stdin", "read_file", "write_file", "edit_file", "apply_patch"]);
  for (const t of tools) {
    assert.equal(t.type, "function");
    assert.ok(t.function.description.length <= 1024, `${t.function.name} description too long`);
    assert.equal(t.function.parameters.type, "object");
  }
});

test("openai-responses: strict Responses API function tools", async () => {
  const tools = await listTools(c.api, "openai-responses");
  const body = responsesBody(tools);
  assert.deepEqual(body.tools!.map((t) => ("name" in t ? t.name : "")), ["bash", "job_output", "job_list", "job_kill", "write_stdin", "read_file", "write_file", "edit_file", "apply_patch"]);
  for (const t of tools) {
    assert.equal(t.strict, true);
    assert.ok(t.description.length <= 1024, `${t.name} description too long`);
    // Strict mode: every property required, no others allowed.
    const props = Object.keys(t.parameters.properties).sort();
    assert.deepEqual([...(t.parameters.required ?? [])].sort(), props, `${t.name}: not every property is required`);
    assert.equal(t.parameters.additionalProperties, false);
  }
  const bash = tools[0].parameters.properties as Record<string, { type: unknown }>;
  assert.deepEqual(bash.timeout.type, ["integer", "null"]);
  assert.deepEqual(bash.workdir.type, ["string", "null"]);
  assert.equal(bash.command.type, "string");

  // What a strict model sends: every argument, null for those it leaves out.
  const agent = must(await c.api.POST("/agents", { body: {} }));
  const res = must(await c.api.POST("/agents/{id}/tools/{name}", {
    params: { path: { id: agent.id, name: "bash" } },
    body: { arguments: { command: "echo strict", description: null, timeout: null, workdir: null, run_in_background: null } },
  }));
  assert.equal(res.isError, false);
  assert.equal(res.text, "strict");
});

test("openai-strict: strict Chat Completions function tools", async () => {
  const tools = await listTools(c.api, "openai-strict");
  const body = chatCompletionsBody(tools);
  assert.deepEqual(body.tools!.map((t) => (t.type === "function" ? t.function.name : "")), ["bash", "job_output", "job_list", "job_kill", "write_stdin", "read_file", "write_file", "edit_file", "apply_patch"]);
  for (const t of tools) {
    assert.equal(t.function.strict, true, `${t.function.name} is not strict`);
    const p = t.function.parameters;
    assert.deepEqual([...(p.required ?? [])].sort(), Object.keys(p.properties).sort(), `${t.function.name}: not every property is required`);
    assert.equal(p.additionalProperties, false);
  }
  // What a strict model sends, as Chat Completions delivers it: a JSON
  // string with every argument, null for those it leaves out.
  const agent = must(await c.api.POST("/agents", { body: {} }));
  const res = must(await c.api.POST("/agents/{id}/tools/{name}", {
    params: { path: { id: agent.id, name: "bash" } },
    body: { arguments: JSON.stringify({ command: "echo strict chat", description: null, timeout: null, workdir: null, run_in_background: null, tty: null, yield_time_ms: null, cols: null, rows: null }) },
  }));
  assert.equal(res.isError, false, res.text);
  assert.equal(res.text, "strict chat");
});

test("anthropic: Messages client tools", async () => {
  const tools = await listTools(c.api, "anthropic");
  const body = anthropicMessagesBody(tools);
  assert.deepEqual(body.tools!.map((t) => ("name" in t ? t.name : "")), ["bash", "job_output", "job_list", "job_kill", "write_stdin", "read_file", "write_file", "edit_file", "apply_patch"]);
  for (const t of tools) {
    assert.ok(t.description.length <= 1024, `${t.name} description too long`);
    assert.equal(t.input_schema.type, "object");
  }
});
