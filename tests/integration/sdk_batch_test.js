// sdk_batch_test.js — OpenAI's Batch API through the official OpenAI Node
// SDK (openai@6.30.1, tests/data/fetch-openai-sdk.sh), unchanged:
// client.files.create (a JSONL upload, purpose "batch"), client.batches
// create, retrieve (polled to the end) and list, client.files.content of
// the output and error files, client.files.list and delete; every line's
// answer equal to the same request sent alone through
// client.completions.create and client.chat.completions.create, a
// malformed line answered in the error file without stopping the batch,
// and client.batches.cancel.
//
// Run by test_sdk_batch.sh against a gpt2d serving the `tiny` model with
// --batch-dir:
//   GPT2D_SDK_DIR=.../openai-sdk/package GPT2D_BASE_URL=http://127.0.0.1:PORT \
//   node sdk_batch_test.js
// Prints "ok: NAME" or "FAIL: NAME" per check, then "N passed, N failed";
// exit status 0 only when every check passed.
'use strict';

const assert = require('node:assert/strict');

const { OpenAI, NotFoundError, toFile } = require(process.env.GPT2D_SDK_DIR);
const BASE = process.env.GPT2D_BASE_URL;
const client = new OpenAI({ apiKey: 'unused', baseURL: BASE + '/v1', maxRetries: 0 });

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

// What an answer says, without what names it (id, created) or the load it
// ran beside (cached tokens, speculation's guesses).
function answer(body) {
  const { id, created, usage, ...rest } = body;
  const { prompt_tokens_details, completion_tokens_details, ...counts } = usage;
  return { ...rest, usage: counts };
}

async function upload(lines, name) {
  const text = lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n') + '\n';
  return client.files.create({ file: await toFile(Buffer.from(text), name), purpose: 'batch' });
}

async function finished(id) {
  for (let i = 0; i < 600; i++) {
    const b = await client.batches.retrieve(id);
    if (['completed', 'failed', 'expired', 'cancelled'].includes(b.status)) return b;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('batch ' + id + ' did not finish');
}

async function jsonl(fileId) {
  if (fileId == null) return [];
  const text = await (await client.files.content(fileId)).text();
  return text.split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
}

const COMPLETIONS = [
  { model: 'tiny', prompt: 'Hello there', max_tokens: 8, temperature: 0 },
  { model: 'tiny', prompt: 'The cat sat', max_tokens: 6, seed: 11, logprobs: 2 },
  { model: 'tiny', prompt: 'One more', max_tokens: 5, seed: 4, n: 2 },
];
const CHATS = [
  { model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5, seed: 2 },
  { model: 'tiny', messages: [{ role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Why?' }], max_tokens: 4, temperature: 0 },
];

async function main() {
  await check('a completions batch: upload, create, poll, download, each answer as sent alone', async () => {
    const lines = COMPLETIONS.map((body, i) => ({
      custom_id: 'c' + i, method: 'POST', url: '/v1/completions', body,
    }));
    lines.splice(1, 0, '{"custom_id": "broken", "method": "POST"'); // malformed
    const file = await upload(lines, 'completions.jsonl');
    assert.equal(file.object, 'file');
    assert.equal(file.purpose, 'batch');
    assert.equal(file.filename, 'completions.jsonl');
    let batch = await client.batches.create({
      input_file_id: file.id, endpoint: '/v1/completions', completion_window: '24h',
      metadata: { suite: 'sdk' },
    });
    assert.equal(batch.object, 'batch');
    assert.deepEqual(batch.metadata, { suite: 'sdk' });
    batch = await finished(batch.id);
    assert.equal(batch.status, 'completed');
    assert.deepEqual(batch.request_counts, { total: 4, completed: 3, failed: 1 });
    const out = await jsonl(batch.output_file_id);
    assert.deepEqual(out.map((x) => x.custom_id).sort(), ['c0', 'c1', 'c2']);
    for (const x of out) {
      assert.equal(x.response.status_code, 200);
      assert.equal(x.error, null);
      const alone = await client.completions.create(COMPLETIONS[Number(x.custom_id.slice(1))]);
      assert.deepEqual(answer(x.response.body), answer(alone), x.custom_id);
    }
    const [bad] = await jsonl(batch.error_file_id);
    assert.equal(bad.custom_id, null);
    assert.equal(bad.response, null);
    assert.equal(bad.error.code, 'invalid_json');
    const page = await client.batches.list({ limit: 5 });
    assert.equal(page.data[0].id, batch.id);
  });

  await check('a chat batch: each answer as sent alone', async () => {
    const file = await upload(CHATS.map((body, i) => ({
      custom_id: 'q' + i, method: 'POST', url: '/v1/chat/completions', body,
    })), 'chats.jsonl');
    const batch = await finished((await client.batches.create({
      input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h',
    })).id);
    assert.equal(batch.status, 'completed');
    assert.equal(batch.error_file_id, null);
    const out = await jsonl(batch.output_file_id);
    assert.equal(out.length, CHATS.length);
    for (const x of out) {
      const alone = await client.chat.completions.create(CHATS[Number(x.custom_id.slice(1))]);
      assert.deepEqual(answer(x.response.body), answer(alone), x.custom_id);
    }
  });

  await check('files: list, retrieve, delete, and a deleted file is NotFoundError', async () => {
    const file = await upload([{ custom_id: 'x', method: 'POST', url: '/v1/completions',
      body: { prompt: 'x', max_tokens: 1 } }], 'gone.jsonl');
    const listed = [];
    for await (const f of client.files.list()) listed.push(f.id);
    assert.ok(listed.includes(file.id));
    assert.equal((await client.files.retrieve(file.id)).bytes, file.bytes);
    const deleted = await client.files.delete(file.id);
    assert.deepEqual(deleted, { id: file.id, object: 'file', deleted: true });
    await assert.rejects(client.files.retrieve(file.id), NotFoundError);
  });

  await check('cancel: a cancelled batch ends cancelled', async () => {
    const many = [];
    for (let i = 0; i < 40; i++) {
      many.push({ custom_id: 'm' + i, method: 'POST', url: '/v1/completions',
        body: { model: 'tiny', prompt: 'Count ' + i, max_tokens: 40, seed: i } });
    }
    const file = await upload(many, 'many.jsonl');
    const created = await client.batches.create({
      input_file_id: file.id, endpoint: '/v1/completions', completion_window: '24h',
    });
    const cancelling = await client.batches.cancel(created.id);
    assert.ok(['cancelling', 'cancelled'].includes(cancelling.status), cancelling.status);
    const batch = await finished(created.id);
    assert.equal(batch.status, 'cancelled');
    const out = await jsonl(batch.output_file_id);
    assert.equal(out.length, batch.request_counts.completed);
    assert.ok(batch.request_counts.completed < 40);
  });

  console.log(passed + ' passed, ' + failed + ' failed');
  process.exit(failed === 0 ? 0 : 1);
}

main();
