// Generates with the web module (gpt2_web.js) under Node, as the page's worker does, and prints
// one JSON object: {kernels, ids, text, tokens, seconds}; or, with --choose, scores the options
// (split at |) after the prompt and prints {kernels, options, logprobs, best}. tools/web_test.sh compares
// them with the native program's output.
//   node examples/web/node_generate.js MODEL.gguf PROMPT N TEMPERATURE TOP_K SEED [--grammar GBNF | --json-schema SCHEMA]
//   node examples/web/node_generate.js MODEL.gguf PROMPT --choose "A|B|C"
// GPT2_WEB_MODULE=PATH loads another build of the module (build.sh's GPT2_WASM_OUT).
// GPT2_WEB_BUDGET_US=N generates as the page does without a Worker (?thread=page): on a stage,
// web_stage_step(N) at a time, and adds the number of calls, "steps".
const fs = require('fs');
const path = require('path');
// Emscripten 3.1.6's loader fetches the .wasm by its file path when Node has fetch (Node 18+),
// which fails ("Failed to parse URL", after the module's whole source); without fetch it reads
// the file, as with `node --no-experimental-fetch`.
delete globalThis.fetch;
const createGpt2 = require(path.resolve(process.env.GPT2_WEB_MODULE || path.join(__dirname, 'gpt2_web.js')));

const usage = 'usage: node_generate.js MODEL.gguf PROMPT N TEMPERATURE TOP_K SEED [--grammar GBNF | --json-schema SCHEMA]\n' +
              '       node_generate.js MODEL.gguf PROMPT --choose "A|B|C"';
const args = process.argv.slice(2);
const [model, prompt] = args;
const choose = args[2] === '--choose' && args.length === 4 ? args[3] : null;
const [n, temperature, topK, seed, flag, constraint] = args.slice(2);
const grammar = flag === '--grammar' ? constraint : '', jsonSchema = flag === '--json-schema' ? constraint : '';
const constrained = args.length === 8 && (flag === '--grammar' || flag === '--json-schema');
if (choose === null && args.length !== 6 && !constrained) {
    console.error(usage);
    process.exit(2);
}
createGpt2().then((gpt2) => {
    const fail = (what) => { console.error(`${what}: ${gpt2.UTF8ToString(gpt2._web_last_error())}`); process.exit(1); };
    const bytes = fs.readFileSync(model);
    const ptr = gpt2._malloc(bytes.length);
    gpt2.HEAPU8.set(bytes, ptr);
    if (gpt2._web_load_model(ptr, bytes.length) !== 0) fail(model);
    const kernels = gpt2.UTF8ToString(gpt2._web_kernels());
    if (choose !== null) {
        const options = [], logprobs = [];
        gpt2.onOption = (index, text, logprob) => { options[index] = text; logprobs[index] = logprob; };
        const best = gpt2.ccall('web_choose', 'number', ['string', 'string'], [prompt, choose]);
        if (best < 0) fail('choose');
        console.log(JSON.stringify({kernels, options, logprobs, best}));
        return;
    }
    const ids = [];
    let text = '';
    gpt2.onToken = (id, piece) => { ids.push(id); text += piece; };
    const start = process.hrtime.bigint();
    const budget = process.env.GPT2_WEB_BUDGET_US;
    const values = [prompt, +n, +temperature, +topK, +seed, grammar, jsonSchema];
    const types = ['string', 'number', 'number', 'number', 'number', 'string', 'string'];
    let steps = 0, running = 1;
    if (!budget) {
        if (gpt2.ccall('web_generate', 'number', types, values) !== 0) fail('generate');
    } else {
        if (gpt2.ccall('web_stage_start', 'number', types, values) !== 0) fail('generate');
        for (; running > 0; steps++) running = gpt2._web_stage_step(+budget);
        if (running < 0) fail('generate');
    }
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    console.log(JSON.stringify({kernels, ids, text, tokens: ids.length, seconds, ...(budget ? {steps} : {})}));
});
