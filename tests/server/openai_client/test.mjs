// The official openai npm client against a running mxserve (started by
// tests/server/test_openai_client.cpp, which passes its address).
//   MXSERVE_BASE_URL  e.g. http://127.0.0.1:8123/v1
//   MXSERVE_MODEL     the served model name (a model with a tokenizer)
// Exits non-zero on the first failed check.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.MXSERVE_BASE_URL;
const model = process.env.MXSERVE_MODEL;
assert.ok(baseURL && model, 'MXSERVE_BASE_URL and MXSERVE_MODEL must be set');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 30_000 });

async function check(name, fn) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    console.error(`not ok - ${name}\n${e && e.stack ? e.stack : e}`);
    process.exit(1);
  }
}

await check('models.list', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.deepEqual(models, [model]);
});

let completionText;
await check('completions.create', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0, ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.model, model);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 12);
  completionText = r.choices[0].text;
});

await check('completions.create stream (include_usage)', async () => {
  const stream = await client.completions.create({
    model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0, ignore_eos: true,
    stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, completionText);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 12);
});

let chatText;
await check('chat.completions.create', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }],
    max_completion_tokens: 10, temperature: 0, ignore_eos: true,
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 10);
  chatText = r.choices[0].message.content;
});

await check('chat.completions.create stream', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }],
    max_completion_tokens: 10, temperature: 0, ignore_eos: true, stream: true,
  });
  let text = '';
  let role = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(text, chatText);
  assert.equal(finish, 'length');
});

await check('chat stream helper (runner) gives the same message', async () => {
  const runner = client.chat.completions.stream({
    model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }],
    max_completion_tokens: 10, temperature: 0, ignore_eos: true,
  });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, chatText);
});

await check('errors: unknown model is NotFoundError, n=0 is BadRequestError', async () => {
  await assert.rejects(
    client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found' && /no-such-model/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 1, n: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'n' && e.type === 'invalid_request_error',
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens',
  );
});

await check('n = 3: greedy choices are identical, seeded sampled ones differ and repeat; usage counts the prompt once', async () => {
  const one = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, ignore_eos: true });
  const g = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, ignore_eos: true, n: 3 });
  assert.deepEqual(g.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of g.choices) assert.equal(c.text, one.choices[0].text);
  assert.equal(g.usage.prompt_tokens, one.usage.prompt_tokens);
  assert.equal(g.usage.completion_tokens, 24);
  const ask = () => client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 12, temperature: 1.0, seed: 11, n: 3, ignore_eos: true,
  });
  const a = await ask(), b = await ask();
  const texts = a.choices.map((c) => c.message.content);
  assert.ok(new Set(texts).size > 1, `sampled choices should differ: ${JSON.stringify(texts)}`);
  assert.deepEqual(b.choices.map((c) => c.message.content), texts);
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 12, temperature: 1.0, seed: 11, n: 3, ignore_eos: true, stream: true,
  });
  const streamed = ['', '', ''];
  for await (const chunk of stream) for (const c of chunk.choices) streamed[c.index] += c.delta?.content ?? '';
  assert.deepEqual(streamed, texts);
});

await check('logprobs: chat top_logprobs and completions logprobs N, sorted, the sampled token among them when greedy', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 6);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    const lps = t.top_logprobs.map((a) => a.logprob);
    assert.deepEqual([...lps].sort((a, b) => b - a), lps);
    assert.equal(t.top_logprobs[0].token, t.token);  // greedy: the most likely one
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6);
    assert.ok(lps.every((x) => x <= 0));
  }
  const c = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 4, temperature: 0, ignore_eos: true, logprobs: 2 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.top_logprobs.length, 4);
  lp.top_logprobs.forEach((d, i) => {
    assert.ok(Object.keys(d).length >= 1 && Object.keys(d).length <= 2);
    assert.ok(Math.abs(Math.max(...Object.values(d)) - lp.token_logprobs[i]) < 1e-6);
  });
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 3, stream: true,
  });
  const streamed = [];
  for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
  assert.deepEqual(streamed, content);
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 1, logprobs: true, top_logprobs: 21 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'top_logprobs',
  );
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 1, top_logprobs: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'top_logprobs' && /logprobs/.test(e.message),
  );
});

const personFormat = {
  type: 'json_schema',
  json_schema: {
    name: 'person', strict: true,
    schema: {
      type: 'object',
      properties: {
        name: { type: 'string', maxLength: 10 },
        age: { type: 'integer' },
        pet: { enum: ['cat', 'dog', null] },
        langs: { type: 'array', items: { type: 'string', maxLength: 4 }, maxItems: 2 },
      },
      required: ['name', 'age', 'pet', 'langs'], additionalProperties: false,
    },
  },
};
let structured;
await check('structured output: response_format json_schema gives JSON that fits the schema', async () => {
  const r = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'A person, as JSON.' }], max_tokens: 400, temperature: 0,
    response_format: personFormat,
  });
  assert.equal(r.choices[0].finish_reason, 'stop');
  structured = r.choices[0].message.content;
  const v = JSON.parse(structured);
  assert.deepEqual(Object.keys(v), ['name', 'age', 'pet', 'langs']);
  assert.equal(typeof v.name, 'string');
  assert.ok(Number.isInteger(v.age));
  assert.ok(['cat', 'dog', null].includes(v.pet));
  assert.ok(Array.isArray(v.langs) && v.langs.length <= 2);
});

await check('structured output: streamed, the same text', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'A person, as JSON.' }], max_tokens: 400, temperature: 0,
    response_format: personFormat, stream: true,
  });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, structured);
});

await check('structured output: json_object, and an unsupported keyword is BadRequestError naming it', async () => {
  const r = await client.completions.create({ model, prompt: '{', max_tokens: 300, temperature: 0.8, seed: 4,
                                              response_format: { type: 'json_object' } });
  if (r.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(r.choices[0].text), 'object');
  else assert.ok(r.choices[0].text.startsWith('{'));
  await assert.rejects(
    client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 5,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer', minimum: 1 } } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format' && /'minimum'/.test(e.message),
  );
});

// Tool calling, against a second server whose model has a chat template with a
// tool-call format (the synthetic Qwen3: <tool_call>{json}</tool_call>).
const toolsURL = process.env.MXSERVE_TOOLS_BASE_URL;
const toolsModel = process.env.MXSERVE_TOOLS_MODEL;
assert.ok(toolsURL && toolsModel, 'MXSERVE_TOOLS_BASE_URL and MXSERVE_TOOLS_MODEL must be set');
const toolClient = new OpenAI({ baseURL: toolsURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 8 } }, required: ['city'] },
  },
}];
const askWeather = { model: toolsModel, messages: [{ role: 'user', content: 'The weather in Paris?' }], tools,
                     tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_tokens: 400 };
let calls;
await check('tools: tool_choice required answers with message.tool_calls', async () => {
  const r = await toolClient.chat.completions.create(askWeather);
  const ch = r.choices[0];
  assert.equal(ch.finish_reason, 'tool_calls');
  calls = ch.message.tool_calls;
  assert.ok(calls.length >= 1);
  for (const c of calls) {
    assert.equal(c.type, 'function');
    assert.match(c.id, /^call_/);
    assert.equal(c.function.name, 'get_weather');
    assert.equal(typeof JSON.parse(c.function.arguments).city, 'string');
  }
});

await check("tools: streamed, the client's accumulated calls are the same", async () => {
  const stream = toolClient.chat.completions.stream({ ...askWeather, stream: true });
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  assert.deepEqual(final.choices[0].message.tool_calls.map((c) => c.function), calls.map((c) => c.function));
});

await check('tools: the call and its result go back into the conversation', async () => {
  const r = await toolClient.chat.completions.create({
    model: toolsModel, tools, max_tokens: 8, temperature: 0,
    messages: [askWeather.messages[0], { role: 'assistant', content: null, tool_calls: calls },
               { role: 'tool', tool_call_id: calls[0].id, content: '18 C, sunny' }],
  });
  assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  await assert.rejects(
    toolClient.chat.completions.create({ ...askWeather, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice',
  );
});

console.log('all openai client checks passed');
