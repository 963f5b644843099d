// sdk_structured_test.js — structured output and tool calls through the
// client libraries people use, unchanged (the kit of
// tests/data/fetch-sdk-kit.sh): the OpenAI Node SDK's zod helpers
// (chat.completions.parse / .stream with zodResponseFormat), the Vercel AI
// SDK over @ai-sdk/openai-compatible (generateObject, streamObject,
// generateText with tools and a two-round agent loop), and LangChain's
// ChatOpenAI (withStructuredOutput, bindTools); then the wire contract
// itself by plain fetch (the tool-call answer and its streamed deltas,
// /v1/completions with a schema, vLLM's structured_outputs).
//
// The model is random, so any valid answer passes; what is checked is that
// it is valid, by the zod schema the client declared (safeParse), by
// JavaScript's own RegExp and JSON.parse, never by gpt2d's answer to
// itself; that finish reasons say "stop" for a whole object and
// "tool_calls" for calls; and that every request the SDKs make (spied on
// through their `fetch` option) is one gpt2d accepts.  Bounds: every string
// has a maxLength, every array a maxItems, so an answer is a few hundred
// tokens at most and max_tokens (MAX_TOKENS) never cuts one; JSON mode,
// which has no bound, gets logit_bias on '"', '}' and ']' so a random model
// closes what it opens.
//
// Run by test_sdk_structured.sh against a gpt2d serving a small random
// model with a 2048-token context:
//   GPT2D_SDK_KIT=.../sdk-kit-tree GPT2D_BASE_URL=http://127.0.0.1:PORT \
//   node sdk_structured_test.js [NAME-SUBSTRING...]
// Prints "ok: NAME" or "FAIL: NAME" per check (with what the server
// answered when it refused a request), then "N passed, N failed"; exit
// status 0 only when every check passed.
'use strict';

const assert = require('node:assert/strict');
const path = require('node:path');
const { createRequire } = require('node:module');

const kitRequire = createRequire(path.join(process.env.GPT2D_SDK_KIT, 'package.json'));
const { OpenAI, BadRequestError } = kitRequire('openai');
const { zodResponseFormat } = kitRequire('openai/helpers/zod');
const { z } = kitRequire('zod');
const ai = kitRequire('ai');
const { createOpenAICompatible } = kitRequire('@ai-sdk/openai-compatible');
const { ChatOpenAI } = kitRequire('@langchain/openai');
const { tool: lcTool } = kitRequire('@langchain/core/tools');
const { AIMessage, AIMessageChunk } = kitRequire('@langchain/core/messages');

const BASE = process.env.GPT2D_BASE_URL;
const MODEL = 'tiny';
const MAX_TOKENS = 800; // see the bound above: far more than any answer
const TIMEOUT_MS = 120000; // one request, under ASan on a loaded machine too
const ONLY = process.argv.slice(2);

// GPT-2 token ids the JSON-mode checks bias (vocab.json).
const TOKEN = { quote: 1, close_bracket: 60, close_brace: 92 };

globalThis.AI_SDK_LOG_WARNINGS = false;

// ---- every request an SDK makes, and what gpt2d answered ----
const requests = [];
async function spyFetch(input, init) {
  const url = typeof input === 'string' ? input : input.url || String(input);
  const entry = { url, body: null, status: null, error: null };
  if (init && typeof init.body === 'string') {
    try {
      entry.body = JSON.parse(init.body);
    } catch {
      entry.body = init.body;
    }
  }
  requests.push(entry);
  const res = await fetch(input, init);
  entry.status = res.status;
  if (res.status >= 400) entry.error = await res.clone().text();
  return res;
}
const chatRequests = () => requests.filter((r) => r.url.endsWith('/chat/completions'));

const openai = new OpenAI({
  apiKey: 'unused', baseURL: BASE + '/v1', maxRetries: 0, timeout: TIMEOUT_MS, fetch: spyFetch,
});
const gpt2d = createOpenAICompatible({
  name: 'gpt2d', baseURL: BASE + '/v1', apiKey: 'unused',
  supportsStructuredOutputs: true, fetch: spyFetch,
});
const aiModel = gpt2d.chatModel(MODEL);
function langchain(seed, extra = {}) {
  return new ChatOpenAI({
    model: MODEL, apiKey: 'unused', maxRetries: 0, timeout: TIMEOUT_MS,
    temperature: 0.9, maxTokens: MAX_TOKENS, modelKwargs: { seed },
    configuration: { baseURL: BASE + '/v1', fetch: spyFetch }, ...extra,
  });
}

// ---- the schemas (zod: the clients' own) ----
// A string, an integer with bounds, an enum, a nested array of objects with
// minItems/maxItems, a nullable field that is also optional (OpenAI's strict
// helper makes it required-but-nullable; the AI SDK and LangChain leave it
// out of `required`).
const Pet = z.object({
  kind: z.enum(['cat', 'dog', 'fish']),
  name: z.string().max(12),
});
const Person = z.object({
  name: z.string().max(20),
  age: z.number().int().min(0).max(120),
  color: z.enum(['red', 'green', 'blue']),
  pets: z.array(Pet).min(1).max(3),
  nickname: z.string().max(12).nullable().optional(),
});
const OrderQuery = z.object({
  order_id: z.number().int().min(1).max(99999),
  urgent: z.boolean(),
  note: z.string().max(16),
});
const City = z.object({ city: z.enum(['Paris', 'Oslo', 'Lima']) });
const Celsius = z.object({ celsius: z.number().int().min(-50).max(60) });
const PROMPT = [
  { role: 'system', content: 'Answer with the requested JSON.' },
  { role: 'user', content: 'Describe a person and their pets.' },
];

// ---- checks ----
let passed = 0;
let failed = 0;
async function check(name, fn) {
  if (ONLY.length > 0 && !ONLY.some((s) => name.includes(s))) return;
  requests.length = 0;
  try {
    await fn();
    passed++;
    console.log('ok: ' + name);
  } catch (e) {
    failed++;
    console.log('FAIL: ' + name);
    const refused = requests.filter((r) => r.status !== null && r.status >= 400);
    for (const r of refused) {
      console.log(`    gpt2d answered ${r.status} to ${new URL(r.url).pathname}: ${r.error}`);
    }
    console.log(String(e && e.stack ? e.stack : e).split('\n').slice(0, 10)
      .map((l) => '    ' + l).join('\n'));
  }
}

// A JSON Schema's maxLength counts code points, zod's .max() UTF-16 units:
// an answer with a character above U+FFFF can be valid for gpt2d and not
// for zod.  Say so when it happens, rather than leave a puzzle.
function assertValid(schema, value, what) {
  const r = schema.safeParse(value);
  if (!r.success) {
    const astral = /[\u{10000}-\u{10FFFF}]/u.test(JSON.stringify(value));
    assert.fail(`${what} does not satisfy its zod schema: ${JSON.stringify(value)}\n` +
      r.error.message + (astral ? '\n(it holds a character above U+FFFF: JSON Schema ' +
      'counts it as one, zod as two)' : ''));
  }
  return r.data;
}

// Compact JSON: no whitespace outside strings.
function assertCompact(text, what) {
  assert.equal(typeof text, 'string', what + ' is a string');
  let inString = false;
  let escaped = false;
  for (const ch of text) {
    if (inString) {
      if (escaped) escaped = false;
      else if (ch === '\\') escaped = true;
      else if (ch === '"') inString = false;
    } else if (ch === '"') {
      inString = true;
    } else if (ch === ' ' || ch === '\t' || ch === '\n' || ch === '\r') {
      assert.fail(`${what} is not compact JSON: ${JSON.stringify(text)}`);
    }
  }
}

function parseJSON(text, what) {
  try {
    return JSON.parse(text);
  } catch (e) {
    assert.fail(`${what} is not JSON (${e.message}): ${JSON.stringify(text)}`);
  }
}

// One tool call as the contract writes it, its arguments checked against
// the schema of the tool it names.
function assertToolCall(tc, schemas, what) {
  assert.deepEqual(Object.keys(tc).sort(), ['function', 'id', 'type'], what + ' keys');
  assert.match(tc.id, /^call_/, what + ' id');
  assert.equal(tc.type, 'function');
  assert.deepEqual(Object.keys(tc.function).sort(), ['arguments', 'name'], what + ' function keys');
  assert.ok(Object.hasOwn(schemas, tc.function.name), what + ' names a declared tool: ' + tc.function.name);
  assertCompact(tc.function.arguments, what + ' arguments');
  return assertValid(schemas[tc.function.name], parseJSON(tc.function.arguments, what + ' arguments'),
    what + ' arguments');
}

async function postJSON(endpoint, body) {
  const r = await fetch(BASE + endpoint, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    signal: AbortSignal.timeout(TIMEOUT_MS),
  });
  const text = await r.text();
  assert.equal(r.status, 200, `${endpoint} answers 200, not ${r.status}: ${text}`);
  return parseJSON(text, endpoint + "'s answer");
}

// The data: payloads of an SSE answer, up to [DONE].
async function postSSE(endpoint, body) {
  const r = await fetch(BASE + endpoint, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }), signal: AbortSignal.timeout(TIMEOUT_MS),
  });
  const text = await r.text();
  assert.equal(r.status, 200, `${endpoint} answers 200, not ${r.status}: ${text}`);
  const events = text.split('\n\n').filter((e) => e.trim() !== '');
  const chunks = [];
  let done = false;
  for (const e of events) {
    assert.ok(e.startsWith('data: '), 'SSE event: ' + JSON.stringify(e));
    const data = e.slice(6);
    assert.ok(!done, 'nothing after [DONE]');
    if (data === '[DONE]') done = true;
    else chunks.push(parseJSON(data, 'SSE chunk'));
  }
  assert.ok(done, 'the stream ends with [DONE]');
  return chunks;
}

function tools(defs) {
  return Object.entries(defs).map(([name, schema]) => ({
    type: 'function',
    function: { name, description: 'The ' + name + ' tool.', parameters: z.toJSONSchema(schema), strict: true },
  }));
}

async function main() {
  // ---- 1. the OpenAI SDK's zod helpers ----
  const personFormat = zodResponseFormat(Person, 'person');
  const base = { model: MODEL, messages: PROMPT, max_tokens: MAX_TOKENS, response_format: personFormat };

  await check('openai: chat.completions.parse with zodResponseFormat', async () => {
    const r = await openai.chat.completions.parse({ ...base, temperature: 0.9, seed: 11 });
    const sent = chatRequests()[0].body.response_format;
    assert.equal(sent.type, 'json_schema');
    assert.equal(sent.json_schema.name, 'person');
    assert.equal(sent.json_schema.strict, true);
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop');
    assert.equal(c.message.role, 'assistant');
    assertCompact(c.message.content, 'content');
    assert.deepEqual(c.message.parsed, parseJSON(c.message.content, 'content'));
    assertValid(Person, c.message.parsed, 'message.parsed');
    assert.ok(r.usage.completion_tokens < MAX_TOKENS, 'usage ' + JSON.stringify(r.usage));
  });

  await check('openai: chat.completions.stream with response_format, finalChatCompletion parsed', async () => {
    const stream = openai.chat.completions.stream({
      ...base, temperature: 0.9, seed: 12, stream_options: { include_usage: true },
    });
    let deltas = '';
    let chunks = 0;
    stream.on('chunk', () => chunks++);
    stream.on('content.delta', ({ delta }) => { deltas += delta; });
    const final = await stream.finalChatCompletion();
    assert.equal(chatRequests()[0].body.stream, true);
    assert.ok(chunks > 2, chunks + ' chunks');
    const c = final.choices[0];
    assert.equal(c.finish_reason, 'stop');
    assert.equal(deltas, c.message.content, 'the deltas spell the content');
    assertCompact(c.message.content, 'content');
    assertValid(Person, c.message.parsed, 'message.parsed');
  });

  await check('openai: parse with n: 3, every choice parsed and valid', async () => {
    const r = await openai.chat.completions.parse({ ...base, temperature: 1.0, seed: 13, n: 3 });
    assert.equal(r.choices.length, 3);
    r.choices.forEach((c, i) => {
      assert.equal(c.index, i);
      assert.equal(c.finish_reason, 'stop', 'choice ' + i);
      assertCompact(c.message.content, 'choice ' + i);
      assertValid(Person, c.message.parsed, 'choice ' + i);
    });
  });

  // ---- 2. a seed gives the same object ----
  await check('openai: same seed at temperature 1.5 gives the same parsed object', async () => {
    const req = { ...base, temperature: 1.5, seed: 4242 };
    const a = await openai.chat.completions.parse(req);
    const b = await openai.chat.completions.parse(req);
    for (const r of [a, b]) {
      assert.equal(r.choices[0].finish_reason, 'stop');
      assertValid(Person, r.choices[0].message.parsed, 'message.parsed');
    }
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    assert.deepEqual(a.choices[0].message.parsed, b.choices[0].message.parsed);
  });

  // ---- 3. JSON mode ----
  await check('openai: response_format json_object gives a JSON object', async () => {
    const r = await openai.chat.completions.create({
      model: MODEL, messages: PROMPT, max_tokens: 200, temperature: 0.9, seed: 14,
      response_format: { type: 'json_object' },
      logit_bias: { [TOKEN.quote]: 100, [TOKEN.close_brace]: 100, [TOKEN.close_bracket]: 100 },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', 'finish_reason of ' + JSON.stringify(c.message.content));
    assertCompact(c.message.content, 'content');
    const v = parseJSON(c.message.content, 'content');
    assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v),
      'an object: ' + c.message.content);
  });

  // ---- 4. a schema gpt2d cannot compile: OpenAI's error object ----
  async function expectSchemaError(schema, param) {
    await assert.rejects(
      openai.chat.completions.create({
        model: MODEL, messages: PROMPT, max_tokens: 10,
        response_format: { type: 'json_schema', json_schema: { name: 'bad', schema, strict: true } },
      }),
      (e) => {
        assert.ok(e instanceof BadRequestError, 'BadRequestError, not ' + (e && e.constructor.name));
        assert.equal(e.status, 400);
        assert.deepEqual(Object.keys(e.error).sort(), ['code', 'message', 'param', 'type']);
        assert.equal(e.type, 'invalid_request_error');
        assert.equal(e.param, param, 'param (message: ' + e.error.message + ')');
        // OpenAI says "invalid_json_schema" for a schema it refuses; null
        // (what gpt2d's other 400s carry) is the other honest answer.
        assert.ok(e.code === null || e.code === 'invalid_json_schema', 'code ' + e.code);
        assert.ok(e.error.message.length > 0);
        return true;
      });
  }
  await check('openai: a misspelt type is a 400 naming response_format.json_schema.schema.type', () =>
    expectSchemaError({ type: 'strnig' }, 'response_format.json_schema.schema.type'));
  await check('openai: a nested misspelt type names its path', () =>
    expectSchemaError({
      type: 'object', properties: { age: { type: 'integr' } }, required: ['age'],
      additionalProperties: false,
    }, 'response_format.json_schema.schema.properties.age.type'));

  // ---- 5. the Vercel AI SDK ----
  const aiCommon = { model: aiModel, maxOutputTokens: MAX_TOKENS, temperature: 0.9, maxRetries: 0 };
  await check('ai: generateObject with a zod schema', async () => {
    const r = await ai.generateObject({
      ...aiCommon, seed: 21, schema: Person, schemaName: 'person',
      prompt: 'Describe a person and their pets.',
      abortSignal: AbortSignal.timeout(TIMEOUT_MS),
    });
    const sent = chatRequests()[0].body.response_format;
    assert.equal(sent.type, 'json_schema', 'supportsStructuredOutputs sends the schema');
    assert.equal(sent.json_schema.name, 'person');
    assert.equal(r.finishReason, 'stop');
    assertValid(Person, r.object, 'object');
  });

  await check('ai: streamObject, the final object valid', async () => {
    const s = ai.streamObject({
      ...aiCommon, seed: 22, schema: Person, prompt: 'Describe a person and their pets.',
      abortSignal: AbortSignal.timeout(TIMEOUT_MS), onError: () => {},
    });
    let partials = 0;
    for await (const p of s.partialObjectStream) {
      assert.equal(typeof p, 'object');
      partials++;
    }
    const obj = await s.object;
    assert.equal(await s.finishReason, 'stop');
    assert.equal(chatRequests()[0].body.stream, true);
    assert.ok(partials > 1, partials + ' partial objects');
    assertValid(Person, obj, 'object');
  });

  await check('ai: generateText with toolChoice naming a tool', async () => {
    const r = await ai.generateText({
      ...aiCommon, seed: 23, prompt: 'Where is order 7?',
      tools: {
        lookup_order: ai.tool({ description: 'Look up an order.', inputSchema: OrderQuery }),
        get_weather: ai.tool({ description: 'The weather in a city.', inputSchema: City }),
      },
      toolChoice: { type: 'tool', toolName: 'lookup_order' },
      abortSignal: AbortSignal.timeout(TIMEOUT_MS),
    });
    assert.deepEqual(chatRequests()[0].body.tool_choice,
      { type: 'function', function: { name: 'lookup_order' } });
    assert.equal(r.finishReason, 'tool-calls');
    assert.ok(r.toolCalls.length >= 1, 'a tool call');
    for (const tc of r.toolCalls) {
      assert.equal(tc.toolName, 'lookup_order');
      assert.match(tc.toolCallId, /^call_/);
      assertValid(OrderQuery, tc.input, 'input');
    }
  });

  // ---- 6. LangChain ----
  await check('langchain: withStructuredOutput, default method (json_schema for this model name)', async () => {
    const llm = langchain(31).withStructuredOutput(Person, { name: 'person', includeRaw: true });
    const { raw, parsed } = await llm.invoke('Describe a person and their pets.');
    const sent = chatRequests()[0].body;
    assert.equal(sent.response_format.type, 'json_schema');
    assert.equal(sent.tools, undefined);
    assert.equal(raw.response_metadata.finish_reason, 'stop');
    assertCompact(raw.content, 'content');
    assertValid(Person, parsed, 'parsed');
  });

  await check('langchain: withStructuredOutput, method functionCalling', async () => {
    const llm = langchain(32).withStructuredOutput(Person,
      { name: 'person', method: 'functionCalling', includeRaw: true });
    const { raw, parsed } = await llm.invoke('Describe a person and their pets.');
    const sent = chatRequests()[0].body;
    assert.deepEqual(sent.tool_choice, { type: 'function', function: { name: 'person' } });
    assert.equal(raw.response_metadata.finish_reason, 'tool_calls');
    assert.equal(raw.tool_calls[0].name, 'person');
    assertValid(Person, parsed, 'parsed');
  });

  const lookupOrder = lcTool(async () => 'shipped', {
    name: 'lookup_order', description: 'Look up an order.', schema: OrderQuery,
  });
  await check('langchain: bindTools with a named tool_choice', async () => {
    const msg = await langchain(33).bindTools([lookupOrder], { tool_choice: 'lookup_order' })
      .invoke('Where is order 7?');
    assert.deepEqual(chatRequests()[0].body.tool_choice,
      { type: 'function', function: { name: 'lookup_order' } });
    assert.ok(AIMessage.isInstance(msg), 'an AIMessage');
    assert.equal(msg.response_metadata.finish_reason, 'tool_calls');
    assert.ok(msg.tool_calls.length >= 1, 'a tool call');
    assert.equal(msg.tool_calls[0].name, 'lookup_order');
    assert.match(msg.tool_calls[0].id, /^call_/);
    assertValid(OrderQuery, msg.tool_calls[0].args, 'args');
    assert.equal((msg.invalid_tool_calls || []).length, 0);
  });

  await check('langchain: bindTools streamed, the chunks merge into a valid call', async () => {
    const stream = await langchain(34).bindTools([lookupOrder], { tool_choice: 'lookup_order' })
      .stream('Where is order 7?');
    let msg = null;
    let chunks = 0;
    for await (const chunk of stream) {
      assert.ok(AIMessageChunk.isInstance(chunk));
      msg = msg === null ? chunk : msg.concat(chunk);
      chunks++;
    }
    assert.ok(chunks > 2, chunks + ' chunks');
    assert.equal(msg.response_metadata.finish_reason, 'tool_calls');
    assert.ok(msg.tool_calls.length >= 1, 'a tool call');
    assert.equal(msg.tool_calls[0].name, 'lookup_order');
    assertValid(OrderQuery, msg.tool_calls[0].args, 'args');
    assert.equal((msg.invalid_tool_calls || []).length, 0);
  });

  // ---- 7. an agent loop: two tool rounds, then text ----
  await check('ai: agent loop of two tool rounds then a text answer', async () => {
    const executed = [];
    const agentTools = {
      get_weather: ai.tool({
        description: 'The weather in a city.', inputSchema: City,
        execute: async (input) => { executed.push(['get_weather', input]); return { celsius: 21 }; },
      }),
      to_fahrenheit: ai.tool({
        description: 'Celsius to Fahrenheit.', inputSchema: Celsius,
        execute: async (input) => {
          executed.push(['to_fahrenheit', input]);
          return { fahrenheit: input.celsius * 9 / 5 + 32 };
        },
      }),
    };
    const r = await ai.generateText({
      ...aiCommon, maxOutputTokens: 200, seed: 41, tools: agentTools,
      prompt: 'What is the weather in Oslo, in Fahrenheit?',
      stopWhen: ai.stepCountIs(3),
      prepareStep: async ({ stepNumber }) => ({ toolChoice: stepNumber < 2 ? 'required' : 'none' }),
      // one call a round, so two rounds are two calls to answer
      providerOptions: { gpt2d: { parallel_tool_calls: false } },
      abortSignal: AbortSignal.timeout(TIMEOUT_MS),
    });
    const schemas = { get_weather: City, to_fahrenheit: Celsius };
    const sent = chatRequests();
    assert.equal(sent.length, 3, 'three requests');
    assert.deepEqual(sent.map((q) => q.status), [200, 200, 200]);
    assert.deepEqual(sent.map((q) => q.body.tool_choice), ['required', 'required', 'none']);
    assert.equal(r.steps.length, 3);
    for (const i of [0, 1]) {
      const step = r.steps[i];
      assert.equal(step.finishReason, 'tool-calls', 'step ' + i);
      assert.equal(step.toolCalls.length, 1, 'step ' + i + ': parallel_tool_calls false');
      assert.equal(step.toolResults.length, 1, 'step ' + i);
      for (const tc of step.toolCalls) assertValid(schemas[tc.toolName], tc.input, 'step ' + i);
    }
    assert.equal(executed.length, 2);
    const last = r.steps[2];
    assert.equal(last.toolCalls.length, 0);
    // free text from a random model: it ends by the token budget or its
    // end-of-text token, either way not with calls
    assert.ok(['stop', 'length'].includes(last.finishReason), last.finishReason);
    assert.equal(typeof r.text, 'string');
    // the transcript the SDK sent back: each round's assistant tool_calls
    // and one role "tool" message per call, with the call's id
    for (const round of [1, 2]) {
      const msgs = sent[round].body.messages;
      const assistants = msgs.filter((m) => m.role === 'assistant' && m.tool_calls);
      const toolMsgs = msgs.filter((m) => m.role === 'tool');
      assert.equal(assistants.length, round, 'request ' + round + ': assistant turns with tool_calls');
      assert.equal(toolMsgs.length, round, 'request ' + round + ': tool messages');
      const ids = assistants.flatMap((m) => m.tool_calls.map((tc) => tc.id));
      assert.deepEqual(toolMsgs.map((m) => m.tool_call_id), ids);
      assert.deepEqual(ids, r.steps.slice(0, round).map((s) => s.toolCalls[0].toolCallId));
    }
  });

  // ---- the wire contract, by plain fetch ----
  const wireTools = tools({ lookup_order: OrderQuery, get_weather: City });
  const wireSchemas = { lookup_order: OrderQuery, get_weather: City };
  const chatBase = {
    model: MODEL, messages: [{ role: 'user', content: 'Where is order 7?' }],
    max_tokens: MAX_TOKENS, temperature: 0.9,
  };

  await check('wire: a named tool_choice answers message.tool_calls, finish_reason tool_calls', async () => {
    const r = await postJSON('/v1/chat/completions', {
      ...chatBase, seed: 51, tools: wireTools,
      tool_choice: { type: 'function', function: { name: 'lookup_order' } },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.role, 'assistant');
    assert.strictEqual(c.message.content, null);
    assert.ok(c.message.tool_calls.length >= 1);
    c.message.tool_calls.forEach((tc, i) => {
      assertToolCall(tc, wireSchemas, 'tool_calls[' + i + ']');
      assert.equal(tc.function.name, 'lookup_order');
    });
    assert.equal(new Set(c.message.tool_calls.map((tc) => tc.id)).size, c.message.tool_calls.length,
      'ids are distinct');
  });

  await check('wire: tool_choice required with parallel_tool_calls false makes one call', async () => {
    const r = await postJSON('/v1/chat/completions', {
      ...chatBase, seed: 52, tools: wireTools, tool_choice: 'required', parallel_tool_calls: false,
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.tool_calls.length, 1);
    assertToolCall(c.message.tool_calls[0], wireSchemas, 'tool_calls[0]');
  });

  await check('wire: streamed tool calls: role, then id/name with "" arguments, then pieces', async () => {
    const chunks = await postSSE('/v1/chat/completions', {
      ...chatBase, seed: 53, tools: wireTools, tool_choice: 'required',
    });
    const choices = chunks.filter((ch) => ch.choices.length > 0).map((ch) => ch.choices[0]);
    assert.equal(choices[0].delta.role, 'assistant');
    const calls = [];
    choices.forEach((ch, k) => {
      const last = k === choices.length - 1;
      assert.equal(ch.finish_reason, last ? 'tool_calls' : null, 'chunk ' + k + ' finish_reason');
      const d = ch.delta;
      assert.ok(d.content === undefined || d.content === null || d.content === '',
        'no text beside calls: ' + JSON.stringify(d));
      for (const tc of d.tool_calls || []) {
        if (tc.id !== undefined) {
          assert.equal(tc.index, calls.length, 'a new call takes the next index');
          assert.deepEqual(Object.keys(tc).sort(), ['function', 'id', 'index', 'type']);
          assert.equal(tc.type, 'function');
          assert.deepEqual(Object.keys(tc.function).sort(), ['arguments', 'name']);
          assert.equal(tc.function.arguments, '');
          calls.push({ id: tc.id, type: 'function', function: { name: tc.function.name, arguments: '' } });
        } else {
          assert.deepEqual(Object.keys(tc).sort(), ['function', 'index']);
          assert.deepEqual(Object.keys(tc.function), ['arguments']);
          assert.ok(tc.index < calls.length, 'a piece of a call already opened');
          calls[tc.index].function.arguments += tc.function.arguments;
        }
      }
    });
    assert.ok(calls.length >= 1, 'a call');
    calls.forEach((tc, i) => assertToolCall(tc, wireSchemas, 'streamed call ' + i));
  });

  await check('wire: a transcript with tool_calls (content null) and role tool is accepted', async () => {
    const r = await postJSON('/v1/chat/completions', {
      ...chatBase, max_tokens: 5, seed: 54, tools: wireTools,
      messages: [
        { role: 'user', content: 'Where is order 7?' },
        {
          role: 'assistant', content: null,
          tool_calls: [{
            id: 'call_abc', type: 'function',
            function: { name: 'lookup_order', arguments: '{"order_id":7,"urgent":false,"note":""}' },
          }],
        },
        { role: 'tool', tool_call_id: 'call_abc', content: '{"status":"shipped"}' },
      ],
      tool_choice: 'none',
    });
    const c = r.choices[0];
    assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
    assert.equal(typeof c.message.content, 'string');
    assert.ok(!c.message.tool_calls || c.message.tool_calls.length === 0, 'tool_choice none: no calls');
  });

  const Small = z.object({ ok: z.boolean(), n: z.number().int().min(1).max(9), tag: z.string().max(8) });
  await check('wire: /v1/completions with response_format json_schema', async () => {
    const r = await postJSON('/v1/completions', {
      model: MODEL, prompt: 'JSON:', max_tokens: 200, temperature: 0.9, seed: 55,
      response_format: {
        type: 'json_schema', json_schema: { name: 'small', schema: z.toJSONSchema(Small), strict: true },
      },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', 'finish_reason of ' + JSON.stringify(c.text));
    assertCompact(c.text, 'text');
    assertValid(Small, parseJSON(c.text, 'text'), 'text');
  });

  async function structured(so, seed) {
    const r = await postJSON('/v1/chat/completions', {
      ...chatBase, max_tokens: 100, seed, structured_outputs: so,
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', 'finish_reason of ' + JSON.stringify(c.message.content));
    return c.message.content;
  }
  await check('wire: structured_outputs json', async () => {
    const text = await structured({ json: z.toJSONSchema(Small) }, 56);
    assertCompact(text, 'content');
    assertValid(Small, parseJSON(text, 'content'), 'content');
  });
  await check('wire: structured_outputs regex', async () => {
    const text = await structured({ regex: '[a-z]{3,8}-[0-9]{2}' }, 57);
    assert.match(text, /^[a-z]{3,8}-[0-9]{2}$/);
  });
  await check('wire: structured_outputs choice', async () => {
    const choices = ['alpha', 'beta gamma', 'δέλτα'];
    const text = await structured({ choice: choices }, 58);
    assert.ok(choices.includes(text), JSON.stringify(text));
  });
  await check('wire: structured_outputs grammar (GBNF)', async () => {
    const gbnf = 'root ::= answer " " digit digit?\nanswer ::= "yes" | "no"\ndigit ::= [0-9]\n';
    const text = await structured({ grammar: gbnf }, 59);
    assert.match(text, /^(yes|no) [0-9][0-9]?$/);
  });

  console.log(`${passed} passed, ${failed} failed`);
  process.exitCode = failed === 0 && passed > 0 ? 0 : 1;
}

main().catch((e) => {
  console.log('FAIL: sdk_structured_test.js ran to the end');
  console.log(String(e && e.stack ? e.stack : e));
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exitCode = 1;
});
