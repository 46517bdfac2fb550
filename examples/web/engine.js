// What the page's engine does with the web module (gpt2_web.js, built by build.sh), shared by the
// Web Worker (worker.js) and the page's own thread (index.html, ?thread=page). Each function
// reports through post(message), with the messages worker.js lists.

// Fetches the GGUF model at url, loads it into a new module instance and returns the instance.
async function gpt2Load(url, post) {
  const gpt2 = await createGpt2();
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status} ${response.statusText}`);
  const bytes = new Uint8Array(await response.arrayBuffer());
  const ptr = gpt2._malloc(bytes.length); // the module owns it from here (web_load_model)
  if (!ptr) throw new Error(`${url}: no memory for ${bytes.length} bytes`);
  gpt2.HEAPU8.set(bytes, ptr);
  if (gpt2._web_load_model(ptr, bytes.length) !== 0) throw new Error(gpt2.UTF8ToString(gpt2._web_last_error()));
  post({type: 'loaded', kernels: gpt2.UTF8ToString(gpt2._web_kernels()), bytes: bytes.length});
  return gpt2;
}

const GPT2_GENERATE_ARGS = ['string', 'number', 'number', 'number', 'number', 'string', 'string'];
const gpt2GenerateValues = (m) => [m.prompt, m.n, m.temperature, m.topK, m.seed, m.grammar || '', m.jsonSchema || ''];

// Generates in one call, which blocks the thread until the text is done (the worker's way).
function gpt2Generate(gpt2, m, post) {
  let tokens = 0;
  gpt2.onToken = (id, text) => { tokens++; post({type: 'token', id, text}); };
  const start = performance.now();
  const result = gpt2.ccall('web_generate', 'number', GPT2_GENERATE_ARGS, gpt2GenerateValues(m));
  const seconds = (performance.now() - start) / 1000;
  if (result !== 0) throw new Error(gpt2.UTF8ToString(gpt2._web_last_error()));
  post({type: 'done', tokens, seconds});
}

// The same generation on the page's own thread: budgetUs microseconds of it per animation frame
// (web_stage_step), so the page keeps drawing while it writes. The same tokens as gpt2Generate.
function gpt2GenerateInFrames(gpt2, m, post, budgetUs) {
  let tokens = 0, frames = 0;
  gpt2.onToken = (id, text) => { tokens++; post({type: 'token', id, text}); };
  const start = performance.now();
  if (gpt2.ccall('web_stage_start', 'number', GPT2_GENERATE_ARGS, gpt2GenerateValues(m)) !== 0)
    throw new Error(gpt2.UTF8ToString(gpt2._web_last_error()));
  const frame = () => {
    const running = gpt2._web_stage_step(budgetUs);
    frames++;
    if (running < 0) post({type: 'error', message: gpt2.UTF8ToString(gpt2._web_last_error())});
    else if (running > 0) requestAnimationFrame(frame);
    else post({type: 'done', tokens, seconds: (performance.now() - start) / 1000, frames});
  };
  requestAnimationFrame(frame);
}

// Scores the options (one string, | between them) as continuations of the prompt.
function gpt2Choose(gpt2, m, post) {
  const options = [], logprobs = [];
  gpt2.onOption = (index, text, logprob) => { options[index] = text; logprobs[index] = logprob; };
  const start = performance.now();
  const best = gpt2.ccall('web_choose', 'number', ['string', 'string'], [m.prompt, m.options]);
  if (best < 0) throw new Error(gpt2.UTF8ToString(gpt2._web_last_error()));
  post({type: 'chosen', options, logprobs, best, seconds: (performance.now() - start) / 1000});
}
