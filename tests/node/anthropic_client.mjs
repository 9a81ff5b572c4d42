// Anthropic's own Node client against a running minfer-server's /v1/messages: a message, the
// same message streamed (its helper assembles the events), a token count, a forced tool call
// and an error, reported as one JSON line for tests/check_server_clients.py to judge.
//   node anthropic_client.mjs BASE_URL API_KEY MODEL
import Anthropic from "@anthropic-ai/sdk";

const [base, key, model] = process.argv.slice(2);
const client = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0, timeout: 60000 });
const messages = [{ role: "user", content: "Once upon" }];
const out = {};

const msg = await client.messages.create({ model, messages, max_tokens: 16, temperature: 0 });
out.message = { type: msg.type, role: msg.role, content: msg.content, stop_reason: msg.stop_reason, usage: msg.usage };

const stream = client.messages.stream({ model, messages, max_tokens: 16, temperature: 0 });
let text = "";
stream.on("text", (t) => { text += t; });
const final = await stream.finalMessage();
out.stream = { text, content: final.content, stop_reason: final.stop_reason, output_tokens: final.usage.output_tokens };

const count = await client.messages.countTokens({ model, messages });
out.count = count.input_tokens;

const tools = [{ name: "get_time", description: "The time now", input_schema: { type: "object", properties: {} } }];
const call = await client.messages.create({ model, messages, max_tokens: 150, temperature: 0, tools, tool_choice: { type: "tool", name: "get_time" } });
out.tool = { stop_reason: call.stop_reason, last: call.content[call.content.length - 1] };
// The same call streamed: the SDK assembles the input_json_delta pieces into the input.
const callStream = client.messages.stream({ model, messages, max_tokens: 150, temperature: 0, tools, tool_choice: { type: "tool", name: "get_time" } });
const streamed = await callStream.finalMessage();
out.tool_stream = { stop_reason: streamed.stop_reason, last: streamed.content[streamed.content.length - 1] };

try {
  await client.messages.create({ model, messages: [], max_tokens: 4 });
  out.error = "no error";
} catch (e) {
  out.error = { status: e.status, type: e.error?.error?.type, message: e.message };
}
console.log(JSON.stringify(out));
