// The page's settings checked before a generation starts: from the address's query string
// (?prompt=JULIET:&temp=0.8&topk=200&seed=7&n=200&run=1) and from the form. Each problem is one
// sentence that names the setting, the value and what it takes; the page shows it in its status
// line and does not start (before, ?temp=-1&run=1 did nothing and said nothing: the browser's own
// form check refused the value without a word). index.html loads this file; Node requires it
// (tests/python/test_web_controls.py).

// The query's keys: those that fill a control (id), and what each number takes.
const GPT2_SETTINGS = {
  prompt: {id: 'prompt'},
  temp: {id: 'temperature', name: 'temperature', min: 0, integer: false, hint: '0 = always the most likely token'},
  topk: {id: 'top-k', name: 'top-k', min: 0, integer: true, hint: '0 = all tokens'},
  seed: {id: 'seed', name: 'seed', min: 0, integer: true},
  n: {id: 'tokens', name: 'tokens', min: 1, integer: true},
  grammar: {id: 'grammar'},
  schema: {id: 'json-schema'},
  choose: {id: 'options'},  // with run=1: score these options (| between them) instead of generating
  model: {},  // the URL of another GGUF file
  run: {},    // 1: start at once
  thread: {}, // page: generate on the page's own thread, a frame budget at a time (no Worker)
};
const GPT2_INT_MAX = 2147483647; // the C API's int (top_k, max_new_tokens); a seed up to 2^53, JavaScript's exact integers

// What is wrong with `text` as the value of setting `key` ('tokens must be an integer from 1 to
// 2147483647'), or '' when nothing is.
function gpt2CheckSetting(key, text) {
  const s = GPT2_SETTINGS[key];
  if (key === 'run') return text === '1' || text === '0' ? '' : 'run=1 starts at once, run=0 waits';
  if (key === 'thread') return text === 'page' || text === 'worker' ? '' : "thread=page writes on the page's own thread, thread=worker (the default) in a Web Worker";
  if (!s || s.min === undefined) return '';
  const max = key === 'seed' ? Number.MAX_SAFE_INTEGER : GPT2_INT_MAX;
  const v = String(text).trim() === '' ? NaN : Number(text);
  if (Number.isFinite(v) && v >= s.min && (!s.integer || (Number.isInteger(v) && v <= max))) return '';
  return `${s.name} must be ${s.integer ? `an integer from ${s.min} to ${max}` : `a number >= ${s.min}`}${s.hint ? ` (${s.hint})` : ''}`;
}

// The problems of a query string (a URLSearchParams): unknown keys and bad values, in order.
function gpt2CheckQuery(query) {
  const problems = [];
  for (const [key, value] of query) {
    if (!(key in GPT2_SETTINGS)) problems.push(`'${key}' is not a setting (${Object.keys(GPT2_SETTINGS).join(', ')})`);
    else if (gpt2CheckSetting(key, value)) problems.push(`${key}=${value}: ${gpt2CheckSetting(key, value)}`);
  }
  return problems;
}

// The problems of the form's values, {key: the field's text}, each with the value as typed.
function gpt2CheckForm(values) {
  const problems = [];
  for (const [key, value] of Object.entries(values))
    if (gpt2CheckSetting(key, value)) problems.push(`'${value}': ${gpt2CheckSetting(key, value)}`);
  return problems;
}

if (typeof module !== 'undefined') module.exports = {GPT2_SETTINGS, gpt2CheckSetting, gpt2CheckQuery, gpt2CheckForm};
