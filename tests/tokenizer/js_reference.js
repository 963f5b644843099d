#!/usr/bin/env node
// js_reference.js — the reference token ids for the tokenizer corpus.
//
//     node js_reference.js PACKAGE_DIR CORPUS_JSON > expected.json
//
// PACKAGE_DIR is the unpacked npm package gpt-3-encoder@1.1.4, a JS port of
// OpenAI's encoder.py.  Its encode() knows nothing of special tokens, so each
// text is split on the literal "<|endoftext|>", the pieces are encoded on their
// own and joined with 50256: exactly what tokenizer_encode promises.
// Output: {"case name": [ids...], ...} in corpus order.
'use strict';

const fs = require('fs');
const path = require('path');

const EOT_TEXT = '<|endoftext|>';
const EOT_ID = 50256;

function main(argv) {
    if (argv.length !== 2) {
        process.stderr.write('usage: js_reference.js PACKAGE_DIR CORPUS_JSON\n');
        return 2;
    }
    const { encode } = require(path.resolve(argv[0]));
    const corpus = JSON.parse(fs.readFileSync(argv[1], 'utf-8'));
    if (!Array.isArray(corpus))
        throw new Error(`${argv[1]}: expected a JSON array of {name, text}`);
    const out = {};
    for (const c of corpus) {
        if (typeof c.name !== 'string' || typeof c.text !== 'string')
            throw new Error(`${argv[1]}: every case needs a string name and text`);
        if (Object.prototype.hasOwnProperty.call(out, c.name))
            throw new Error(`${argv[1]}: duplicate case name "${c.name}"`);
        const ids = [];
        c.text.split(EOT_TEXT).forEach((piece, i) => {
            if (i > 0)
                ids.push(EOT_ID);
            for (const id of encode(piece)) {
                if (!Number.isInteger(id))
                    throw new Error(`case "${c.name}": encode() gave ${id}`);
                ids.push(id);
            }
        });
        out[c.name] = ids;
    }
    process.stdout.write(JSON.stringify(out) + '\n');
    return 0;
}

process.exitCode = main(process.argv.slice(2));
