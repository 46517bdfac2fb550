// The Web Worker that runs gpt2.h (gpt2_web.js, built by build.sh). Generating blocks this thread,
// never the page's: each token goes to the page by postMessage as soon as it is sampled.
//   page -> worker  {type: 'load', url}   fetch the GGUF model at url and load it
//                   {type: 'generate', prompt, n, temperature, topK, seed, grammar, jsonSchema}
//                   {type: 'choose', prompt, options}  options: one string, | between them
//   worker -> page  {type: 'loaded', kernels, bytes}  {type: 'token', id, text}
//                   {type: 'done', tokens, seconds}   {type: 'error', message}
//                   {type: 'chosen', options, logprobs, best, seconds}  options: the texts scored
importScripts('gpt2_web.js');

let ready = null; // resolves to the module once the model is loaded

async function load(url) {
    const gpt2 = await createGpt2();
    const response = await fetch(url);
    if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${response.statusText}`);
    const bytes = new Uint8Array(await response.arrayBuffer());
    const ptr = gpt2._malloc(bytes.length); // the module owns it from here (web_load_model)
    if (!ptr) throw new Error(`${url}: no memory for ${bytes.length} bytes`);
    gpt2.HEAPU8.set(bytes, ptr);
    if (gpt2._web_load_model(ptr, bytes.length) !== 0) throw new Error(gpt2.UTF8ToString(gpt2._web_last_error()));
    postMessage({type: 'loaded', kernels: gpt2.UTF8ToString(gpt2._web_kernels()), bytes: bytes.length});
    return gpt2;
}

function generate(gpt2, m) {
    let tokens = 0;
    gpt2.onToken = (id, text) => { tokens++; postMessage({type: 'token', id, text}); };
    const start = performance.now();
    const result = gpt2.ccall('web_generate', 'number', ['string', 'number', 'number', 'number', 'number', 'string', 'string'],
                              [m.prompt, m.n, m.temperature, m.topK, m.seed, m.grammar || '', m.jsonSchema || '']);
    const seconds = (performance.now() - start) / 1000;
    if (result !== 0) throw new Error(gpt2.UTF8ToString(gpt2._web_last_error()));
    postMessage({type: 'done', tokens, seconds});
}

function choose(gpt2, m) {
    const options = [], logprobs = [];
    gpt2.onOption = (index, text, logprob) => { options[index] = text; logprobs[index] = logprob; };
    const start = performance.now();
    const best = gpt2.ccall('web_choose', 'number', ['string', 'string'], [m.prompt, m.options]);
    if (best < 0) throw new Error(gpt2.UTF8ToString(gpt2._web_last_error()));
    postMessage({type: 'chosen', options, logprobs, best, seconds: (performance.now() - start) / 1000});
}

onmessage = async (event) => {
    const m = event.data;
    try {
        if (m.type === 'load') await (ready = load(m.url));
        else if (m.type === 'generate') generate(await ready, m);
        else if (m.type === 'choose') choose(await ready, m);
    } catch (e) {
        postMessage({type: 'error', message: String(e.message || e)});
    }
};
