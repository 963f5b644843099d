// sdk_responses_test.js — POST /v1/responses through the official OpenAI
// Node SDK (openai@6.30.1, tests/data/fetch-openai-sdk.sh), unchanged:
// client.responses.create whole and with stream: true, the
// client.responses.stream helper's finalResponse(), tools, text.format
// json_schema, refusals as BadRequestError naming the Responses field; each
// answer checked against client.chat.completions.create of the same
// conversation and seed (issue 33's brief, §7.2).  Stored responses:
// previous_response_id three turns deep (cached_tokens growing, the answer
// that of the conversation sent whole), responses.retrieve, delete,
// inputItems.list, and another key refused all of them.
//
// Two phases, the daemon restarted between them on the same
// --responses-dir and --kv-cache-dir: "first" (everything above; the
// conversation written to GPT2D_STATE_FILE), "restarted" (the conversation
// retrieved and continued: its earlier turns cached from the disk tier,
// the answer that of the conversation sent whole).
//
// Run by test_sdk_responses.sh against a gpt2d serving a tiny-shaped model
// with a 1024-token context:
//   GPT2D_SDK_DIR=.../openai-sdk/package GPT2D_BASE_URL=http://127.0.0.1:PORT \
//   GPT2D_API_KEY_FOR_TEST=KEY GPT2D_OTHER_KEY_FOR_TEST=KEY2 \
//   GPT2D_PHASE=first|restarted GPT2D_STATE_FILE=FILE node sdk_responses_test.js
// Prints "ok: NAME" or "FAIL: NAME" per check, then "N passed, N failed";
// exit status 0 only when every check passed.
'use strict';

const assert = require('node:assert/strict');

const fs = require('node:fs');

const { OpenAI, BadRequestError, NotFoundError } = require(process.env.GPT2D_SDK_DIR);
const BASE = process.env.GPT2D_BASE_URL;
const KEY = process.env.GPT2D_API_KEY_FOR_TEST;
const client = new OpenAI({ apiKey: KEY, baseURL: BASE + '/v1', maxRetries: 0 });
const other = new OpenAI({
  apiKey: process.env.GPT2D_OTHER_KEY_FOR_TEST, baseURL: BASE + '/v1', maxRetries: 0,
});
const PHASE = process.env.GPT2D_PHASE || 'first';
const STATE = process.env.GPT2D_STATE_FILE;

const NO_EOT = { 50256: -100 };
const EOT_LIKELY = { 50256: 4 };
const WEATHER = {
  type: 'function', name: 'get_weather', description: 'The weather in a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string', enum: ['Paris', 'Rome', 'Oslo'] } },
    required: ['city'], additionalProperties: false,
  },
};
const PERSON = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 8 }, age: { type: 'integer' } },
  required: ['name', 'age'], additionalProperties: false,
};

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log('ok: ' + name);
  } catch (e) {
    failed++;
    console.log('FAIL: ' + name);
    console.log(String(e && e.stack ? e.stack : e).split('\n').slice(0, 12)
      .map((l) => '    ' + l).join('\n'));
  }
}

async function model() {
  const list = await client.models.list();
  return list.data[0].id;
}

// The text of a Response that answered with one message item.
function messageText(r) {
  assert.equal(r.output.length, 1, JSON.stringify(r.output));
  const item = r.output[0];
  assert.equal(item.type, 'message');
  assert.equal(item.role, 'assistant');
  assert.match(item.id, /^msg_[0-9a-f]{24}$/);
  assert.equal(item.content.length, 1);
  assert.equal(item.content[0].type, 'output_text');
  assert.deepEqual(item.content[0].annotations, []);
  return item.content[0].text;
}

function assertFinished(r, chat) {
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_[0-9a-f]{24}$/);
  const fin = chat.choices[0].finish_reason;
  assert.equal(r.status, fin === 'length' ? 'incomplete' : 'completed');
  assert.deepEqual(r.incomplete_details,
    fin === 'length' ? { reason: 'max_output_tokens' } : null);
  assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
  assert.equal(r.usage.output_tokens, chat.usage.completion_tokens);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(typeof r.usage.input_tokens_details.cached_tokens, 'number');
  assert.deepEqual(r.usage.output_tokens_details, { reasoning_tokens: 0 });
}

// Runs a streamed create to its end; checks the numbering; returns the events.
async function streamed(body) {
  const stream = await client.responses.create({ ...body, stream: true });
  const events = [];
  for await (const ev of stream) events.push(ev);
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  return events;
}

const cached = (r) => r.usage.input_tokens_details.cached_tokens;

// A Response as plain data: what the server sent, without what the SDK
// adds to its objects (output_text, _request_id).
function plain(r) {
  const copy = JSON.parse(JSON.stringify(r));
  delete copy.output_text;
  delete copy._request_id;
  return copy;
}

function assertNotFoundBadRequest(e) {
  assert.ok(e instanceof BadRequestError, String(e));
  assert.equal(e.param, 'previous_response_id');
  assert.equal(e.code, 'previous_response_not_found');
  return true;
}

// A cache domain of its own: the conversation sent whole finds nothing
// cached, so its answer owes nothing to the stored one's blocks.
let salts = 0;
function freshSalt() {
  salts++;
  return 'whole-' + process.pid + '-' + salts;
}

async function metric(name) {
  const res = await fetch(BASE + '/metrics', { headers: { Authorization: 'Bearer ' + KEY } });
  const text = await res.text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  assert.ok(line, name + ' in /metrics');
  return Number(line.split(' ')[1]);
}

// The three turns the first phase stores and the second continues.
const TURNS = ['Tell me a story', 'Go on', 'And then?'];
const STORY = { max_output_tokens: 12, logit_bias: NO_EOT };

async function storedChecks(MODEL) {
  const t = [];
  await check('previous_response_id three turns deep: cached_tokens grows, the answer is the conversation sent whole', async () => {
    for (let i = 0; i < TURNS.length; i++) {
      t.push(await client.responses.create({
        model: MODEL, input: TURNS[i], seed: 21 + i, ...STORY,
        ...(i > 0 ? { previous_response_id: t[i - 1].id } : {}),
      }));
      assert.equal(t[i].previous_response_id, i > 0 ? t[i - 1].id : null);
      assert.equal(t[i].store, true);
      messageText(t[i]);
    }
    // each turn's prompt begins with the whole previous prompt, cached
    assert.ok(cached(t[1]) >= t[0].usage.input_tokens, JSON.stringify(t[1].usage));
    assert.ok(cached(t[2]) >= t[1].usage.input_tokens, JSON.stringify(t[2].usage));
    assert.ok(cached(t[0]) < cached(t[1]) && cached(t[1]) < cached(t[2]));
    const whole = await client.responses.create({
      model: MODEL, seed: 23, ...STORY, cache_salt: freshSalt(),
      input: [{ role: 'user', content: TURNS[0] }, t[0].output[0],
        { role: 'user', content: TURNS[1] }, t[1].output[0],
        { role: 'user', content: TURNS[2] }],
    });
    assert.equal(cached(whole), 0);
    assert.equal(whole.usage.input_tokens, t[2].usage.input_tokens);
    assert.equal(whole.output_text, t[2].output_text);
  });
  if (t.length < 3) return null;

  await check('responses.retrieve: the Response as it was created', async () => {
    for (const r of t) assert.deepEqual(plain(await client.responses.retrieve(r.id)), plain(r));
  });

  await check('inputItems.list: the request\'s own items, newest first, paged', async () => {
    const page = await client.responses.inputItems.list(t[2].id);
    assert.equal(page.data.length, 1);
    const [item] = page.data;
    assert.match(item.id, /^msg_[0-9a-f]{24}$/);
    assert.deepEqual([item.type, item.role, item.status, item.content],
      ['message', 'user', 'completed', [{ type: 'input_text', text: TURNS[2] }]]);
    const input = [{ role: 'user', content: 'a' }, { role: 'system', content: 'b' },
      { role: 'user', content: [{ type: 'input_text', text: 'c' }] }];
    const r = await client.responses.create({ model: MODEL, input, max_output_tokens: 1, seed: 1 });
    const asc = await client.responses.inputItems.list(r.id, { order: 'asc' });
    assert.deepEqual(asc.data.map((i) => [i.role, i.content[0].text]),
      [['user', 'a'], ['system', 'b'], ['user', 'c']]);
    const texts = [];
    for await (const i of client.responses.inputItems.list(r.id, { limit: 1 })) texts.push(i.content[0].text);
    assert.deepEqual(texts, ['c', 'b', 'a']);
  });

  await check('a streamed response is stored as its last event shows it, and continues', async () => {
    const events = await streamed({ model: MODEL, input: 'Stream me', seed: 7, ...STORY });
    const last = events[events.length - 1].response;
    assert.deepEqual(plain(await client.responses.retrieve(last.id)), last);
    const next = await client.responses.create({
      model: MODEL, previous_response_id: last.id, input: 'More', seed: 8, ...STORY,
    });
    assert.ok(cached(next) >= last.usage.input_tokens, JSON.stringify(next.usage));
  });

  await check('a function_call_output continues the call it answers', async () => {
    let call;
    for (let seed = 1; seed < 20 && !call; seed++) {
      const r = await client.responses.create({
        model: MODEL, input: 'Weather?', tools: [WEATHER], tool_choice: 'required',
        max_output_tokens: 120, seed,
      });
      if (r.status === 'completed') call = r;
    }
    assert.ok(call, 'no seed under 20 finished its call');
    const answer = { type: 'function_call_output', call_id: call.output[0].call_id, output: '{"temp":20}' };
    const body = { model: MODEL, tools: [WEATHER], max_output_tokens: 8, seed: 2, logit_bias: NO_EOT };
    const next = await client.responses.create({ ...body, previous_response_id: call.id, input: [answer] });
    const whole = await client.responses.create({
      ...body, cache_salt: freshSalt(),
      input: [{ role: 'user', content: 'Weather?' }, ...call.output, answer],
    });
    assert.equal(next.output_text, whole.output_text);
    assert.equal(next.usage.input_tokens, whole.usage.input_tokens);
    assert.ok(cached(next) >= call.usage.input_tokens);
  });

  await check('another key can neither retrieve, list, delete nor continue a response', async () => {
    const id = t[1].id;
    for (const call of [() => other.responses.retrieve(id), () => other.responses.delete(id),
      () => other.responses.inputItems.list(id)]) {
      await assert.rejects(call(), (e) => {
        assert.ok(e instanceof NotFoundError, String(e));
        // word for word what a made-up id gets
        assert.equal(e.message, "404 Response with id '" + id + "' not found.");
        return true;
      });
    }
    await assert.rejects(other.responses.create({
      model: MODEL, input: 'x', previous_response_id: id,
    }), assertNotFoundBadRequest);
    // the same conversation sent whole by the other key finds none of it
    const whole = await other.responses.create({
      model: MODEL, seed: 22, ...STORY,
      input: [{ role: 'user', content: TURNS[0] }, t[0].output[0], { role: 'user', content: TURNS[1] }],
    });
    assert.equal(whole.output_text, t[1].output_text);
    assert.ok(cached(whole) < t[0].usage.input_tokens, JSON.stringify(whole.usage));
    assert.deepEqual(plain(await client.responses.retrieve(id)), plain(t[1]));
  });

  await check('responses.delete: gone for retrieve and continue; its continuations still continue', async () => {
    const d = await client.responses.create({ model: MODEL, input: TURNS[0], seed: 21, ...STORY });
    const e = await client.responses.create({
      model: MODEL, previous_response_id: d.id, input: TURNS[1], seed: 22, ...STORY,
    });
    await client.responses.delete(d.id);
    await assert.rejects(client.responses.retrieve(d.id), NotFoundError);
    await assert.rejects(client.responses.delete(d.id), NotFoundError);
    await assert.rejects(client.responses.create({
      model: MODEL, input: 'x', previous_response_id: d.id,
    }), assertNotFoundBadRequest);
    const f = await client.responses.create({
      model: MODEL, previous_response_id: e.id, input: TURNS[2], seed: 23, ...STORY,
    });
    assert.equal(f.output_text, t[2].output_text);
  });

  await check('store: false keeps nothing', async () => {
    const r = await client.responses.create({ model: MODEL, input: 'Hi', max_output_tokens: 2, store: false });
    assert.equal(r.store, false);
    await assert.rejects(client.responses.retrieve(r.id), NotFoundError);
    await assert.rejects(client.responses.create({
      model: MODEL, input: 'x', previous_response_id: r.id,
    }), assertNotFoundBadRequest);
  });
  return t;
}

// The second phase: the daemon was restarted on the same directories.
async function restartedChecks(MODEL) {
  const t = JSON.parse(fs.readFileSync(STATE, 'utf8'));
  await check('after a restart: a record damaged on disk is not found, and its continuations still continue', async () => {
    await assert.rejects(client.responses.retrieve(t[0].id), NotFoundError);
    await assert.rejects(client.responses.inputItems.list(t[0].id, { after: 'x' }), NotFoundError);
    await assert.rejects(client.responses.create({
      model: MODEL, input: 'x', previous_response_id: t[0].id,
    }), assertNotFoundBadRequest);
  });
  await check('after a restart: retrieve and inputItems.list answer as before', async () => {
    assert.deepEqual(plain(await client.responses.retrieve(t[2].id)), plain(t[2]));
    const page = await client.responses.inputItems.list(t[2].id);
    assert.deepEqual(page.data.map((i) => i.content[0].text), [TURNS[2]]);
  });
  await check('after a restart: a continued turn finds the earlier turns cached on disk, and is the conversation sent whole', async () => {
    const before = await metric('gpt2d_kv_hit_tokens_total{tier="disk"}');
    const next = await client.responses.create({
      model: MODEL, previous_response_id: t[2].id, input: 'The end?', seed: 24, ...STORY,
    });
    assert.ok(cached(next) >= t[2].usage.input_tokens, JSON.stringify(next.usage));
    assert.ok(await metric('gpt2d_kv_hit_tokens_total{tier="disk"}') >= before + t[2].usage.input_tokens);
    const whole = await client.responses.create({
      model: MODEL, seed: 24, ...STORY, cache_salt: freshSalt(),
      input: [{ role: 'user', content: TURNS[0] }, t[0].output[0],
        { role: 'user', content: TURNS[1] }, t[1].output[0],
        { role: 'user', content: TURNS[2] }, t[2].output[0],
        { role: 'user', content: 'The end?' }],
    });
    assert.equal(cached(whole), 0);
    assert.equal(whole.usage.input_tokens, next.usage.input_tokens);
    assert.equal(whole.output_text, next.output_text);
  });
}

async function main() {
  const MODEL = await model();
  if (PHASE === 'restarted') {
    await restartedChecks(MODEL);
    console.log(passed + ' passed, ' + failed + ' failed');
    process.exitCode = failed === 0 && passed > 0 ? 0 : 1;
    return;
  }
  const ask = { model: MODEL, instructions: 'Be brief.', input: 'Hello there' };
  const asChat = {
    model: MODEL,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello there' }],
  };

  await check('create: the Response, its output_text equal to chat of the same conversation', async () => {
    for (const [seed, max] of [[1, 8], [2, 40]]) {
      const r = await client.responses.create({ ...ask, max_output_tokens: max, seed });
      const chat = await client.chat.completions.create({
        ...asChat, max_completion_tokens: max, seed,
      });
      assertFinished(r, chat);
      const text = messageText(r);
      assert.equal(r.output_text, text);
      assert.equal(text, chat.choices[0].message.content);
      assert.equal(r.instructions, 'Be brief.');
      assert.equal(r.max_output_tokens, max);
      assert.equal(r.model, MODEL);
      assert.equal(r.store, true);
      assert.deepEqual(r.text, { format: { type: 'text' } });
    }
  });

  await check('create stream: the events in order, joined equal to the whole answer', async () => {
    for (const [body, end] of [
      [{ ...ask, max_output_tokens: 5, seed: 3, logit_bias: NO_EOT }, 'response.incomplete'],
      [{ ...ask, max_output_tokens: 60, seed: 4 }, null],
    ]) {
      const whole = await client.responses.create(body);
      const events = await streamed(body);
      const types = events.map((e) => e.type);
      const n = types.filter((t) => t === 'response.output_text.delta').length;
      assert.deepEqual(types, [
        'response.created', 'response.in_progress', 'response.output_item.added',
        'response.content_part.added',
        ...Array(n).fill('response.output_text.delta'),
        'response.output_text.done', 'response.content_part.done',
        'response.output_item.done', end || 'response.' + whole.status,
      ]);
      const itemId = events[2].item.id;
      const deltas = events.filter((e) => e.type === 'response.output_text.delta');
      for (const d of deltas) {
        assert.equal(d.item_id, itemId);
        assert.equal(d.output_index, 0);
        assert.equal(d.content_index, 0);
        assert.deepEqual(d.logprobs, []);
      }
      const text = deltas.map((d) => d.delta).join('');
      assert.equal(events[n + 4].text, text);
      assert.equal(text, whole.output_text);
      const last = events[events.length - 1].response;
      assert.equal(last.status, whole.status);
      assert.deepEqual(last.incomplete_details, whole.incomplete_details);
      assert.equal(last.output[0].content[0].text, text);
      assert.deepEqual(last.usage, { ...whole.usage, input_tokens_details: last.usage.input_tokens_details });
    }
  });

  await check('responses.stream: finalResponse() of a completed answer equals create', async () => {
    let seed = 0;
    let whole;
    for (; seed < 20; seed++) {
      whole = await client.responses.create({ ...ask, max_output_tokens: 30, seed, logit_bias: EOT_LIKELY });
      if (whole.status === 'completed') break;
    }
    assert.equal(whole.status, 'completed', 'no seed under 20 ends its answer');
    const stream = client.responses.stream({ ...ask, max_output_tokens: 30, seed, logit_bias: EOT_LIKELY });
    let joined = '';
    stream.on('response.output_text.delta', (e) => { joined += e.delta; });
    const fin = await stream.finalResponse();
    assert.equal(fin.status, 'completed');
    // finalResponse() adds no output_text without a parseable format (the
    // SDK's maybeParseResponse): the message's text is compared
    assert.equal(messageText(fin), whole.output_text);
    assert.equal(joined, whole.output_text);
    assert.equal(fin.id.startsWith('resp_'), true);
    assert.deepEqual(fin.usage.output_tokens, whole.usage.output_tokens);
  });

  await check('tools: required makes function_call items equal to chat\'s calls', async () => {
    for (const seed of [1, 2]) {
      const body = {
        model: MODEL, input: 'Weather?', tools: [WEATHER], tool_choice: 'required',
        max_output_tokens: 120, seed,
      };
      const r = await client.responses.create(body);
      const chat = await client.chat.completions.create({
        model: MODEL, messages: [{ role: 'user', content: 'Weather?' }],
        tools: [{ type: 'function', function: { ...WEATHER, type: undefined, strict: true } }],
        tool_choice: 'required', max_completion_tokens: 120, seed,
      });
      assertFinished(r, chat);
      const calls = chat.choices[0].message.tool_calls;
      assert.ok(calls.length >= 1);
      assert.deepEqual(r.output.map((i) => [i.type, i.name, i.arguments]),
        calls.map((c) => ['function_call', c.function.name, c.function.arguments]));
      for (const item of r.output) {
        assert.match(item.call_id, /^call_[0-9a-f]{24}$/);
        assert.match(item.id, /^fc_[0-9a-f]{24}$/);
      }
      if (r.status === 'completed')
        assert.ok(['Paris', 'Rome', 'Oslo'].includes(JSON.parse(r.output[0].arguments).city));
      assert.equal(r.output_text, '');
      assert.equal(r.tools[0].strict, true);

      const stream = client.responses.stream(body);
      let args = '';
      stream.on('response.function_call_arguments.delta', (e) => {
        if (e.output_index === 0) args += e.delta;
      });
      const fin = await stream.finalResponse();
      assert.deepEqual(fin.output.map((i) => [i.name, i.arguments]),
        r.output.map((i) => [i.name, i.arguments]));
      assert.equal(args, r.output[0].arguments);
    }
  });

  await check('text.format json_schema: the answer is chat\'s response_format answer', async () => {
    const format = { type: 'json_schema', name: 'person', schema: PERSON, strict: true };
    let completed = 0;
    for (const seed of [1, 2, 3]) {
      const r = await client.responses.create({
        model: MODEL, input: 'A person', text: { format }, max_output_tokens: 80, seed,
      });
      const chat = await client.chat.completions.create({
        model: MODEL, messages: [{ role: 'user', content: 'A person' }],
        response_format: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON, strict: true } },
        max_completion_tokens: 80, seed,
      });
      assertFinished(r, chat);
      assert.equal(r.output_text, chat.choices[0].message.content);
      assert.deepEqual(r.text, { format });
      if (r.status === 'completed') {
        const v = JSON.parse(r.output_text);
        assert.deepEqual(Object.keys(v).sort(), ['age', 'name']);
        assert.ok(Number.isInteger(v.age));
        assert.ok(typeof v.name === 'string' && v.name.length <= 8);
        completed++;
      }
    }
    assert.ok(completed > 0, 'no seed finished its JSON within 80 tokens');
  });

  await check('what cannot be honoured is a BadRequestError naming the field', async () => {
    const cases = [
      [{ tools: [{ type: 'web_search' }] }, 'tools[0].type'],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/a.png' }] }] },
        'input[0].content[0].type'],
      [{ reasoning: { effort: 'low' } }, 'reasoning'],
      [{ background: true }, 'background'],
      [{ previous_response_id: 'resp_0' }, 'previous_response_id'],
      [{ previous_response_id: 'resp_0', session_id: 's' }, 'session_id'],
      [{ truncation: 'middle' }, 'truncation'],
      [{ include: ['message.output_text.logprobs'] }, 'include[0]'],
      [{ tools: [{ ...WEATHER, name: 'a b' }] }, 'tools[0].name'],
      [{ max_output_tokens: 2000 }, 'max_output_tokens'],
    ];
    for (const [extra, param] of cases) {
      await assert.rejects(
        client.responses.create({ model: MODEL, input: 'Hi', ...extra }),
        (e) => {
          assert.ok(e instanceof BadRequestError, String(e));
          assert.equal(e.status, 400);
          assert.equal(e.param, param);
          assert.equal(e.type, 'invalid_request_error');
          return true;
        });
    }
  });

  const turns = await storedChecks(MODEL);
  if (turns !== null) fs.writeFileSync(STATE, JSON.stringify(turns.map(plain)));

  console.log(passed + ' passed, ' + failed + ' failed');
  process.exitCode = failed === 0 && passed > 0 ? 0 : 1;
}

main().catch((e) => {
  console.log('FAIL: the script itself: ' + (e && e.stack ? e.stack : e));
  process.exitCode = 1;
});
