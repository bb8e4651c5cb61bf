// An agent loop: a model on the OpenAI Responses API (the official `openai`
// SDK), its tools run by dshd (the dshd TypeScript client).
//
// It creates a dshd agent, hands the model dshd's tools in the Responses
// format (GET /tools?format=openai-responses: strict function tools), and
// loops: each function_call the model makes goes to
// POST /agents/{id}/tools/{name} with its call_id and its arguments as the
// model wrote them (a JSON string), and dshd's result goes back as a
// function_call_output, until the model answers without calling a tool.
//
// Environment: OPENAI_API_KEY (and OPENAI_BASE_URL, read by the SDK),
// OPENAI_MODEL (default gpt-5), DSHD_URL (default http://127.0.0.1:7433),
// DSHD_TOKEN or DSHD_TOKEN_FILE (default ~/.dsh/server.token).
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import OpenAI from "openai";
import { createDshdClient, listTools, must } from "dshd-client";

const env = process.env;
const token = env.DSHD_TOKEN ?? readFileSync(env.DSHD_TOKEN_FILE ?? `${homedir()}/.dsh/server.token`, "utf8").trim();
const dshd = createDshdClient(env.DSHD_URL ?? "http://127.0.0.1:7433", token);
const openai = new OpenAI(); // OPENAI_API_KEY, OPENAI_BASE_URL
const model = env.OPENAI_MODEL ?? "gpt-5";

const agent = must(await dshd.api.POST("/agents", { body: {} }));
console.log("agent", agent.id);
const tools = await listTools(dshd.api, "openai-responses");

const input: OpenAI.Responses.ResponseInputItem[] = [
  { role: "user", content: process.argv.slice(2).join(" ") || "Print your session id with bash." },
];
for (let turn = 0; ; turn++) {
  if (turn === 20) throw new Error("the model was still calling tools after 20 turns");
  const response = await openai.responses.create({ model, input, tools });
  input.push(...(response.output as OpenAI.Responses.ResponseInputItem[]));
  const calls = response.output.filter((item) => item.type === "function_call");
  if (calls.length === 0) {
    console.log(response.output_text);
    break;
  }
  for (const call of calls) {
    const result = must(await dshd.api.POST("/agents/{id}/tools/{name}", {
      params: { path: { id: agent.id, name: call.name } },
      body: { callId: call.call_id, arguments: call.arguments },
    }));
    console.log(`${call.name} ${call.arguments} -> isError=${result.isError}\n${result.text}`);
    // isError: the model's call was wrong; the text says how, for the model to correct it.
    input.push({ type: "function_call_output", call_id: call.call_id, output: result.text });
  }
}
