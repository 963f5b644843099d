// sdk_chat_test.js — POST /v1/chat/completions through the official OpenAI
// Node SDK (openai@6.30.1, tests/data/fetch-openai-sdk.sh), unchanged:
// client.chat.completions.create streamed and not, a conversation kept in a
// session (session_id sent as an extra body field, as the SDK passes any),
// its second turn's cached_tokens, the chat shapes, finish_reason, usage,
// logprobs, n, refusals as BadRequestError; and the reply checked against
// client.completions.create of the rendered transcript with the same seed,
// the path the numpy reference checks.
//
// Run by test_sdk_chat.sh against a gpt2d serving the `tiny` model:
//   GPT2D_SDK_DIR=.../openai-sdk/package GPT2D_BASE_URL=http://127.0.0.1:PORT \
//   node sdk_chat_test.js
// Prints "ok: NAME" or "FAIL: NAME" per check, then "N passed, N failed";
// exit status 0 only when every check passed.
'use strict';

const assert = require('node:assert/strict');

const { OpenAI, BadRequestError } = require(process.env.GPT2D_SDK_DIR);
const BASE = process.env.GPT2D_BASE_URL;
const client = new OpenAI({ apiKey: 'unused', baseURL: BASE + '/v1', maxRetries: 0 });

// The built-in chat template (README "POST /v1/chat/completions").
const TEMPLATE = {
  system: ['System: ', '\n'],
  user: ['User: ', '\n'],
  assistant: ['Assistant:', '\n'],
};
const STOP = ['\nUser:', '\nSystem:'];
const HELLO = 18435; // " Hello"
const NO_EOT = { 50256: -100 };

function render(messages) {
  let text = '';
  for (const m of messages) {
    const [prefix, suffix] = TEMPLATE[m.role === 'developer' ? 'system' : m.role];
    text += prefix + m.content + suffix;
  }
  return text + TEMPLATE.assistant[0];
}

async function tokenize(text) {
  const r = await fetch(BASE + '/tokenize', {
    method: 'POST',
    body: JSON.stringify({ content: text }),
  });
  assert.equal(r.status, 200);
  return (await r.json()).tokens;
}

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

function assertUsage(u, prompt, completion, cached) {
  assert.equal(u.prompt_tokens, prompt);
  assert.equal(u.completion_tokens, completion);
  assert.equal(u.total_tokens, prompt + completion);
  assert.equal(u.prompt_tokens_details.cached_tokens, cached);
}

function assertEntry(e, nTop) {
  assert.deepEqual(Object.keys(e).sort(), ['bytes', 'logprob', 'token', 'top_logprobs']);
  assert.equal(typeof e.token, 'string');
  assert.ok(e.logprob <= 0, 'logprob ' + e.logprob);
  assert.ok(e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
  assert.equal(e.top_logprobs.length, nTop);
  for (let k = 0; k < nTop; k++) {
    const t = e.top_logprobs[k];
    assert.deepEqual(Object.keys(t).sort(), ['bytes', 'logprob', 'token']);
    if (k > 0) assert.ok(t.logprob <= e.top_logprobs[k - 1].logprob, 'top order');
  }
}

const session = 'sdk-chat-' + process.pid;
const turn1 = [
  { role: 'system', content: 'Be kind.' },
  { role: 'user', content: 'Greet me' },
];
let reply = null;
let turn2 = null;
let streamed = null;
const sampling = {
  model: 'tiny', max_tokens: 10, temperature: 0.9, seed: 8, top_k: 40,
  logit_bias: NO_EOT,
};
const turn2Req = { ...sampling, logprobs: true, top_logprobs: 3 };

async function main() {
  await check('chat.completions.create answers a chat.completion', async () => {
    // a reply of known tokens (+100 on " Hello"), so the next turn's prompt
    // holds exactly the tokens the session cached
    const r = await client.chat.completions.create({
      model: 'tiny', messages: turn1, max_tokens: 4, temperature: 0,
      logit_bias: { [HELLO]: 100 }, logprobs: true, top_logprobs: 2,
      session_id: session,
    });
    assert.match(r.id, /^chatcmpl-[0-9a-f]{24}$/);
    assert.equal(r.object, 'chat.completion');
    assert.ok(Number.isInteger(r.created) && Math.abs(r.created - Date.now() / 1000) < 300);
    assert.equal(r.model, 'tiny');
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(c.message.role, 'assistant');
    assert.equal(c.message.content, ' Hello'.repeat(4));
    // fields the SDK's types require, null without a refusal
    assert.strictEqual(c.message.refusal, null);
    assert.strictEqual(c.logprobs.refusal, null);
    assert.equal(c.finish_reason, 'length');
    assert.equal(c.logprobs.content.length, 4);
    for (const e of c.logprobs.content) {
      assertEntry(e, 2);
      assert.equal(e.token, ' Hello');
      assert.deepEqual(e.bytes, [...Buffer.from(' Hello')]);
    }
    assertUsage(r.usage, (await tokenize(render(turn1))).length, 4, 0);
    reply = c.message.content;
  });

  await check('streamed turn two reuses the whole previous transcript', async () => {
    assert.ok(reply !== null, 'turn one failed');
    turn2 = turn1.concat([
      { role: 'assistant', content: reply },
      { role: 'user', content: 'Again' },
    ]);
    const stream = await client.chat.completions.create({
      ...turn2Req, messages: turn2, session_id: session, stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const ids = new Set(chunks.map((c) => c.id));
    assert.equal(ids.size, 1);
    assert.match(chunks[0].id, /^chatcmpl-/);
    for (const c of chunks) assert.equal(c.object, 'chat.completion.chunk');
    const choices = chunks.filter((c) => c.choices.length > 0).map((c) => c.choices[0]);
    assert.deepEqual(choices[0].delta, { role: 'assistant', content: '', refusal: null });
    assert.ok(choices.every((c) => !c.logprobs || c.logprobs.refusal === null));
    assert.ok(choices.slice(1).every((c) => !('role' in c.delta)));
    const last = choices[choices.length - 1];
    assert.ok(['stop', 'length'].includes(last.finish_reason), last.finish_reason);
    assert.ok(choices.slice(0, -1).every((c) => c.finish_reason === null));
    const entries = choices.flatMap((c) => (c.logprobs ? c.logprobs.content : []));
    entries.forEach((e) => assertEntry(e, 3));
    const usageChunk = chunks[chunks.length - 1];
    assert.deepEqual(usageChunk.choices, []);
    // every token of turn one's prompt and reply but the reply's last
    // (sampled, never run through the model) comes from the session
    const said = await tokenize(render(turn1) + reply);
    assertUsage(usageChunk.usage, (await tokenize(render(turn2))).length,
      entries.length, said.length - 1);
    streamed = {
      content: choices.map((c) => c.delta.content || '').join(''),
      finish: last.finish_reason,
      entries,
    };
  });

  await check('the whole answer equals the stream, cached or cold', async () => {
    assert.ok(streamed !== null, 'the streamed turn failed');
    const r = await client.chat.completions.create({
      ...turn2Req, messages: turn2, cache_salt: 'cold-' + process.pid,
    });
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
    const c = r.choices[0];
    assert.equal(c.message.content, streamed.content);
    assert.equal(c.finish_reason, streamed.finish);
    assert.deepEqual(c.logprobs.content, streamed.entries);
  });

  await check('the reply is /v1/completions\' text of the rendered transcript', async () => {
    assert.ok(streamed !== null, 'the streamed turn failed');
    const r = await client.completions.create({
      ...sampling, prompt: render(turn2), stop: STOP, logprobs: 3,
    });
    const c = r.choices[0];
    assert.equal(c.text, streamed.content);
    assert.equal(c.finish_reason, streamed.finish);
    assert.deepEqual(c.logprobs.tokens, streamed.entries.map((e) => e.token));
    assert.deepEqual(c.logprobs.token_logprobs, streamed.entries.map((e) => e.logprob));
    streamed.entries.forEach((e, i) => {
      for (const t of e.top_logprobs) {
        assert.equal(c.logprobs.top_logprobs[i][t.token], t.logprob, 'top ' + i);
      }
    });
  });

  await check('n gives n indexed choices', async () => {
    const r = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }],
      n: 3, max_completion_tokens: 5, seed: 1, logit_bias: NO_EOT,
    });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
    for (const c of r.choices) {
      assert.equal(c.finish_reason, 'length');
      assert.equal(c.logprobs, null);
    }
    assert.equal(r.usage.completion_tokens, 15);
  });

  await check('what cannot be honoured is a BadRequestError naming the field', async () => {
    const cases = [
      [{ tools: [{ type: 'function', function: { name: 'f g', parameters: {} } }] },
        'tools[0].function.name'],
      [{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'strnig' } } } },
        'response_format.json_schema.schema.type'],
      [{ messages: [{ role: 'user', content: [
        { type: 'image_url', image_url: { url: 'https://example.com/a.png' } }] }] },
      'messages[0].content[0].type'],
      [{ n: 9 }, 'n'],
    ];
    for (const [extra, param] of cases) {
      await assert.rejects(
        client.chat.completions.create({
          model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], ...extra,
        }),
        (e) => {
          assert.ok(e instanceof BadRequestError, String(e));
          assert.equal(e.status, 400);
          assert.equal(e.param, param);
          assert.equal(e.type, 'invalid_request_error');
          return true;
        });
    }
  });

  console.log(passed + ' passed, ' + failed + ' failed');
  process.exitCode = failed === 0 && passed > 0 ? 0 : 1;
}

main().catch((e) => {
  console.log('FAIL: the script itself: ' + (e && e.stack ? e.stack : e));
  process.exitCode = 1;
});
