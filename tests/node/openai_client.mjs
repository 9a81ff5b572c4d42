// OpenAI's own Node client against a running minfer-server: a chat, the same chat streamed,
// a legacy completion, embeddings, the model list and an error, reported as one JSON line for
// tests/check_server_clients.py to judge.  node openai_client.mjs BASE_URL API_KEY MODEL
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

try {
  await client.chat.completions.create({ model, messages: [], max_tokens: 4 });
  out.error = "no error";
} catch (e) {
  out.error = { status: e.status, message: e.message };
}
console.log(JSON.stringify(out));
