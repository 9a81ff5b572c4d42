// OpenAI's own Node client against a running minfer-server: a chat, the same chat streamed,
// a legacy completion, embeddings, the model list and an error, the chat again through the
// Responses API (whole, streamed through the client's event accumulator, a forced function
// call, a response continued, retrieved and deleted), reported as one JSON line for tests/check_server_clients.py to judge.
//   node openai_client.mjs BASE_URL API_KEY MODEL
import OpenAI from "openai";

const [base, key, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: key, maxRetries: 0, timeout: 60000 });
const messages = [{ role: "user", content: "Once upon" }];
const out = {};

const chat = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
out.chat = { id: chat.id, object: chat.object, content: chat.choices[0].message.content, role: chat.choices[0].message.role,
             finish_reason: chat.choices[0].finish_reason, usage: chat.usage };

const stream = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0, stream: true,
                                                      stream_options: { include_usage: true } });
const s = { content: "", ids: new Set(), chunks: 0, finish_reason: null, usage: null, role: null };
for await (const chunk of stream) {
  s.chunks++;
  s.ids.add(chunk.id);
  if (chunk.usage) s.usage = chunk.usage;
  const c = chunk.choices[0];
  if (!c) continue;
  if (c.delta.role) s.role = c.delta.role;
  if (c.delta.content) s.content += c.delta.content;
  if (c.finish_reason) s.finish_reason = c.finish_reason;
}
out.stream = { ...s, ids: s.ids.size };

const done = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
out.completion = { text: done.choices[0].text, usage: done.usage };

// The client asks for base64 by default and decodes it to numbers.
const emb = await client.embeddings.create({ model, input: ["Once upon", "a time"] });
out.embeddings = { data: emb.data.map((d) => ({ index: d.index, embedding: Array.from(d.embedding) })), usage: emb.usage };

const models = await client.models.list();
out.models = models.data.map((m) => m.id);
out.model = (await client.models.retrieve(model)).id;
try {
  await client.models.retrieve("gpt-4o");
  out.other_model = "no error";
} catch (e) {
  out.other_model = { status: e.status, message: e.message };
}

try {
  await client.chat.completions.create({ model, messages: [], max_tokens: 4 });
  out.error = "no error";
} catch (e) {
  out.error = { status: e.status, message: e.message };
}
// The Responses API: the same prompt (a string input is one user message).
const resp = await client.responses.create({ model, input: "Once upon", max_output_tokens: 16, temperature: 0 });
out.responses = { id: resp.id, object: resp.object, status: resp.status, text: resp.output_text, types: resp.output.map((o) => o.type),
                  usage: resp.usage, incomplete: resp.incomplete_details };
// responses.stream() accumulates the events into a response and throws on an inconsistent one.
const rstream = client.responses.stream({ model, input: [{ role: "user", content: [{ type: "input_text", text: "Once upon" }] }],
                                          max_output_tokens: 16, temperature: 0 });
const rs = { deltas: "", types: [], sequence: [] };
for await (const event of rstream) {
  rs.types.push(event.type);
  rs.sequence.push(event.sequence_number);
  if (event.type === "response.output_text.delta") rs.deltas += event.delta;
  // The last event carries the whole response (the client's snapshot takes only a completed one).
  if (event.type === "response.completed" || event.type === "response.incomplete") rs.last = { status: event.response.status, usage: event.response.usage };
}
const final = await rstream.finalResponse();
const accumulated = final.output.filter((o) => o.type === "message").flatMap((o) => o.content).map((c) => c.text).join("");
out.responses_stream = { ...rs, text: accumulated, kept: (await client.responses.retrieve(final.id)).output_text };
const tools = [{ type: "function", name: "get_time", description: "The time in a zone",
                 parameters: { type: "object", properties: { zone: { type: "string", enum: ["UTC", "CET"] } }, required: ["zone"] } }];
const call = await client.responses.create({ model, input: "What time is it?", tools, tool_choice: "required", max_output_tokens: 200, temperature: 0 });
out.responses_call = call.output.map((o) => ({ type: o.type, name: o.name, call_id: o.call_id, arguments: o.arguments }));
// The call's result goes back as items; the reply then is text again.
const after = await client.responses.create({ model, max_output_tokens: 8, temperature: 0, tools, tool_choice: "none",
                                              input: [{ role: "user", content: "What time is it?" }, ...call.output,
                                                      { type: "function_call_output", call_id: call.output[0]?.call_id ?? "x", output: "12:00" }] });
out.responses_after = { status: after.status, types: after.output.map((o) => o.type), input_tokens: after.usage.input_tokens };
// A kept response continued (its input and output go before the new input), retrieved, deleted.
const next = await client.responses.create({ model, previous_response_id: resp.id, input: "And then?", max_output_tokens: 8, temperature: 0 });
out.responses_next = { text: next.output_text, input_tokens: next.usage.input_tokens, previous: next.previous_response_id };
const listed = [];
for await (const item of client.responses.inputItems.list(after.id, { order: "asc" })) listed.push({ type: item.type, role: item.role, id: item.id });
out.responses_input_items = listed;
const again = await client.responses.retrieve(resp.id);
out.responses_retrieved = { id: again.id, text: again.output_text, status: again.status };
await client.responses.delete(resp.id);
for (const [key, call] of [["retrieve", () => client.responses.retrieve(resp.id)],
                           ["continue", () => client.responses.create({ model, input: "x", previous_response_id: resp.id })]]) {
  try {
    await call();
    out["responses_deleted_" + key] = "no error";
  } catch (e) {
    out["responses_deleted_" + key] = { status: e.status, message: e.message };
  }
}
console.log(JSON.stringify(out));
