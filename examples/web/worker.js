// The Web Worker that runs gpt2.h (gpt2_web.js, built by build.sh; engine.js does the work).
// Generating blocks this thread, never the page's: each token goes to the page by postMessage as
// soon as it is sampled.
//   page -> worker  {type: 'load', url}   fetch the GGUF model at url and load it
//                   {type: 'generate', prompt, n, temperature, topK, seed, grammar, jsonSchema}
//                   {type: 'choose', prompt, options}  options: one string, | between them
//   worker -> page  {type: 'loaded', kernels, bytes}  {type: 'token', id, text}
//                   {type: 'done', tokens, seconds}   {type: 'error', message}
//                   {type: 'chosen', options, logprobs, best, seconds}  options: the texts scored
importScripts('gpt2_web.js', 'engine.js');

let ready = null; // resolves to the module once the model is loaded

onmessage = async (event) => {
  const m = event.data;
  try {
    if (m.type === 'load') await (ready = gpt2Load(m.url, postMessage));
    else if (m.type === 'generate') gpt2Generate(await ready, m, postMessage);
    else if (m.type === 'choose') gpt2Choose(await ready, m, postMessage);
  } catch (e) {
    postMessage({type: 'error', message: String(e.message || e)});
  }
};
