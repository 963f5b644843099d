// sdk_messages_test.js — gpt2d's /v1/messages through Anthropic's own
// TypeScript SDK, unchanged (@anthropic-ai/sdk from the kit of
// tests/data/fetch-sdk-kit.sh): messages.create whole and with stream:
// true, messages.stream() and its finalMessage()/finalText(),
// messages.countTokens, stop_sequences, the errors the SDK maps to its
// classes, and the key sent as x-api-key instead of the SDK's bearer token.
//
// The model is random, so what is checked is agreement: a Message's text
// is the text of the same conversation on /v1/chat/completions (same seed),
// its usage adds up to chat's prompt_tokens, the stream's pieces make the
// whole answer.  The SDK's baseURL has no /v1 (its paths carry it), and
// 1.x sends apiKey as Authorization: Bearer.
//
// Run by test_sdk_messages.sh against a gpt2d with one API key:
//   GPT2D_SDK_KIT=.../sdk-kit-tree GPT2D_BASE_URL=http://127.0.0.1:PORT \
//   GPT2D_API_KEY_FOR_TEST=KEY node sdk_messages_test.js [NAME-SUBSTRING...]
// Prints "ok: NAME" or "FAIL: NAME" per check, then "N passed, N failed";
// exit status 0 only when every check passed.
'use strict';

const assert = require('node:assert/strict');
const path = require('node:path');
const { createRequire } = require('node:module');

const kitRequire = createRequire(path.join(process.env.GPT2D_SDK_KIT, 'package.json'));
const Anthropic = kitRequire('@anthropic-ai/sdk').default;
const { BadRequestError, AuthenticationError } = kitRequire('@anthropic-ai/sdk');

const BASE = process.env.GPT2D_BASE_URL;
const KEY = process.env.GPT2D_API_KEY_FOR_TEST;
const MODEL = 'tiny';
const ONLY = process.argv.slice(2);
const SYSTEM = 'Be brief.';
const USER = [{ role: 'user', content: 'Hi, who are you?' }];
const STOP_REASONS = ['end_turn', 'max_tokens', 'stop_sequence'];

const client = new Anthropic({ apiKey: KEY, baseURL: BASE, maxRetries: 0, timeout: 60000 });

let passed = 0;
let failed = 0;

async function check(name, fn) {
  if (ONLY.length > 0 && !ONLY.some((s) => name.includes(s))) return;
  try {
    await fn();
    passed++;
    console.log('ok: ' + name);
  } catch (e) {
    failed++;
    console.log('FAIL: ' + name);
    console.log(String(e && e.stack ? e.stack : e).replace(/^/gm, '    '));
  }
}

// The same conversation on /v1/chat/completions, by plain fetch.
async function chat(body) {
  const res = await fetch(BASE + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer ' + KEY },
    body: JSON.stringify(body),
  });
  assert.equal(res.status, 200, await res.clone().text());
  return res.json();
}

const textOf = (m) => {
  assert.equal(m.content.length, 1);
  assert.equal(m.content[0].type, 'text');
  return m.content[0].text;
};

async function main() {
  const params = {
    model: MODEL, max_tokens: 8, system: SYSTEM, messages: USER, temperature: 1, top_k: 40, seed: 3,
  };
  let whole = null;
  let chatAnswer = null;

  await check('messages.create equals the chat answer, usage adds up', async () => {
    whole = await client.messages.create(params);
    chatAnswer = await chat({
      model: MODEL, max_tokens: 8, temperature: 1, top_k: 40, seed: 3,
      messages: [{ role: 'system', content: SYSTEM }, ...USER],
    });
    assert.equal(whole.type, 'message');
    assert.equal(whole.role, 'assistant');
    assert.match(whole.id, /^msg_/);
    assert.ok(STOP_REASONS.includes(whole.stop_reason), whole.stop_reason);
    assert.equal(textOf(whole), chatAnswer.choices[0].message.content);
    assert.equal(whole.stop_reason,
      { length: 'max_tokens', stop: 'end_turn' }[chatAnswer.choices[0].finish_reason]);
    assert.equal(whole.usage.input_tokens + whole.usage.cache_read_input_tokens,
      chatAnswer.usage.prompt_tokens);
    assert.equal(whole.usage.output_tokens, chatAnswer.usage.completion_tokens);
  });

  await check('messages.create stream:true: event order, text equals the whole answer', async () => {
    const stream = await client.messages.create({ ...params, stream: true });
    const types = [];
    let text = '';
    let delta = null;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'content_block_delta') text += event.delta.text;
      if (event.type === 'message_delta') delta = event;
    }
    const n = types.filter((t) => t === 'content_block_delta').length;
    assert.deepEqual(types, ['message_start', 'content_block_start',
      ...Array(n).fill('content_block_delta'), 'content_block_stop', 'message_delta', 'message_stop']);
    assert.equal(text, textOf(whole));
    assert.equal(delta.delta.stop_reason, whole.stop_reason);
    assert.equal(delta.usage.output_tokens, whole.usage.output_tokens);
  });

  await check('messages.stream: finalMessage() and finalText() equal the whole answer', async () => {
    const stream = client.messages.stream(params);
    let pieces = '';
    stream.on('text', (t) => { pieces += t; });
    const final = await stream.finalMessage();
    assert.equal(textOf(final), textOf(whole));
    assert.equal(pieces, textOf(whole));
    assert.equal(final.stop_reason, whole.stop_reason);
    assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
    assert.equal(final.usage.input_tokens + final.usage.cache_read_input_tokens,
      whole.usage.input_tokens + whole.usage.cache_read_input_tokens);
    assert.equal(await client.messages.stream(params).finalText(), textOf(whole));
  });

  await check('stop_sequences: stop_reason stop_sequence names the string', async () => {
    const greedy = { model: MODEL, max_tokens: 24, messages: USER, temperature: 0 };
    const free = textOf(await client.messages.create(greedy));
    assert.ok(free.length >= 6, JSON.stringify(free));
    const stop = free.slice(free.length >> 1, (free.length >> 1) + 3);
    const m = await client.messages.create({ ...greedy, stop_sequences: ['\u2603', stop] });
    assert.equal(m.stop_reason, 'stop_sequence');
    assert.equal(m.stop_sequence, stop);
    assert.equal(textOf(m), free.slice(0, free.indexOf(stop)));
    const s = await client.messages.stream({ ...greedy, stop_sequences: [stop] }).finalMessage();
    assert.equal(s.stop_reason, 'stop_sequence');
    assert.equal(s.stop_sequence, stop);
  });

  await check('messages.countTokens equals the prompt of the answer', async () => {
    const r = await client.messages.countTokens({ model: MODEL, system: SYSTEM, messages: USER });
    assert.deepEqual(Object.keys(r), ['input_tokens']);
    assert.equal(r.input_tokens, chatAnswer.usage.prompt_tokens);
  });

  await check('second turn: history read from the cache', async () => {
    const m = await client.messages.create({
      ...params,
      messages: [...USER, { role: 'assistant', content: textOf(whole) },
        { role: 'user', content: 'And then?' }],
    });
    assert.ok(m.usage.cache_read_input_tokens > 0, JSON.stringify(m.usage));
  });

  await check('a missing max_tokens and an image block: BadRequestError in Anthropic shape', async () => {
    const bodies = [
      { model: MODEL, messages: USER },
      { ...params, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] },
    ];
    const fields = ['max_tokens', 'messages.0.content.0.type'];
    for (let i = 0; i < bodies.length; i++) {
      await assert.rejects(client.messages.create(bodies[i]), (err) => {
        assert.ok(err instanceof BadRequestError, String(err));
        assert.equal(err.status, 400);
        assert.equal(err.error.type, 'error');
        assert.equal(err.error.error.type, 'invalid_request_error');
        assert.ok(err.error.error.message.startsWith(fields[i]), err.error.error.message);
        assert.equal(err.type, 'invalid_request_error');
        return true;
      });
    }
  });

  await check('a wrong key: AuthenticationError (401, authentication_error)', async () => {
    const wrong = new Anthropic({ apiKey: 'sk-wrong', baseURL: BASE, maxRetries: 0 });
    await assert.rejects(wrong.messages.create(params), (err) => {
      assert.ok(err instanceof AuthenticationError, String(err));
      assert.equal(err.status, 401);
      assert.equal(err.error.error.type, 'authentication_error');
      return true;
    });
    const wrongX = new Anthropic({
      apiKey: 'unused', baseURL: BASE, maxRetries: 0,
      defaultHeaders: { 'x-api-key': 'sk-wrong', authorization: null },
    });
    await assert.rejects(wrongX.messages.countTokens({ model: MODEL, messages: USER }),
      (err) => err instanceof AuthenticationError);
  });

  await check('the key as x-api-key (no Authorization header) is accepted', async () => {
    const viaX = new Anthropic({
      apiKey: 'unused', baseURL: BASE, maxRetries: 0,
      defaultHeaders: { 'x-api-key': KEY, authorization: null },
    });
    const m = await viaX.messages.create(params);
    assert.equal(textOf(m), textOf(whole));
  });

  console.log(`${passed} passed, ${failed} failed`);
  process.exitCode = failed === 0 && passed > 0 ? 0 : 1;
}

main().catch((e) => {
  console.log('FAIL: sdk_messages_test.js ran to the end');
  console.log(String(e && e.stack ? e.stack : e));
  console.log(`${passed} passed, ${failed + 1} failed`);
  process.exitCode = 1;
});
