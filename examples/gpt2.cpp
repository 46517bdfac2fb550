// gpt2: the command-line program. With a prompt it generates once and exits (plain text, or one
// JSON object with --json); without one, on a terminal, it starts the interactive REPL.
#define GPT2_IMPLEMENTATION
#include "gpt2.h"

#include "cli.h"

#include <cfloat>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

static const char* usage =
    "usage: gpt2 [-m MODEL] [-p TEXT | --prompt-ids 1,2,3] [options]\n"
    "       gpt2 [-m MODEL] --tokenize TEXT | --tokenize-file PATH\n"
    "\n"
    "Generates text with a GPT-2-class model (a GGUF file; see tools/convert.py).\n"
    "Without -p, --prompt-ids or --load-state, on a terminal, starts the interactive REPL.\n"
    "\n"
    "  -m, --model PATH     model file (default: the shipped Shakespeare model)\n"
    "  -p, --prompt TEXT    prompt text (needs a model with a vocabulary)\n"
    "  --prompt-ids LIST    prompt as comma-separated token ids\n"
    "  -n, --n-tokens N     tokens to generate (default 256); 0 = only evaluate the prompt\n"
    "  --temp T             temperature, 0 = greedy (default 0.8)\n"
    "  --top-k K            sample from the K most likely tokens, 0 = all (default 200)\n"
    "  --top-p P            of those, the most likely whose probabilities add up to P (0 to 1;\n"
    "                       default off)\n"
    "  --min-p P            drop tokens less than P times as likely as the most likely (0 to 1;\n"
    "                       default off)\n"
    "  --repeat-penalty R   make recent tokens less likely: logits > 0 divided by R, others\n"
    "                       multiplied (e.g. 1.1; default off)\n"
    "  --repeat-last-n N    recent = the last N tokens of the context (default 64; -1 = all)\n"
    "  --presence-penalty P subtract P from the logit of every recent token (default 0)\n"
    "  --frequency-penalty P\n"
    "                       subtract P from a token's logit per time it is recent (default 0)\n"
    "  --stop STR           stop when the text contains STR; STR and what follows are not\n"
    "                       printed (repeat for more strings)\n"
    "  --stop-at-eos        stop when the model ends its text (<|endoftext|>)\n"
    "  --grammar FILE       the text must follow the GBNF grammar in FILE (docs/GRAMMARS.md);\n"
    "                       generation ends when it is a whole sentence of it\n"
    "  --grammar-text GBNF  the same with the grammar given inline\n"
    "  --json-schema FILE   the text must be JSON that the JSON Schema in FILE accepts\n"
    "                       (docs/GRAMMARS.md lists the keywords enforced; others are refused)\n"
    "  --json-compact       with --json-schema: no whitespace between JSON's tokens\n"
    "  --choose \"A|B|C\"     instead of generating, print the option (split at |) the model finds\n"
    "                       the most likely continuation of the prompt (gpt2_choose); with\n"
    "                       --json: prompt_ids, options, logprobs, best, choice\n"
    "  --seed S             random seed (default 1337)\n"
    "  -t, --threads N      threads (default: all cores)\n"
    "  --ctx N              context length of the session (default: the model's)\n"
    "  --context-policy P   when the context is full: 'exact' drops the oldest token and recomputes\n"
    "                       the rest for every new token (nanoGPT's way; the default), 'discard'\n"
    "                       drops half of them at once (much faster long generations; the REPL's\n"
    "                       default)\n"
    "  --keep N             with discard: the first N tokens (a preamble) always stay (default 0)\n"
    "  --save-state FILE    after generating, save the conversation (its tokens and cache) to FILE\n"
    "  --load-state FILE    before the prompt, load a conversation saved by --save-state; without\n"
    "                       -p or --prompt-ids, generation continues it (greedy: exactly as if never\n"
    "                       interrupted; sampling restarts from --seed). Give the same --ctx and\n"
    "                       --context-policy as when it was saved\n"
    "  --json               print one JSON object: prompt_ids, ids, text, end (why generation\n"
    "                       ended: max_tokens, grammar, stop, eos, callback), last_logits; with a\n"
    "                       grammar also grammar_complete\n"
    "  --tokenize TEXT      print the token ids of TEXT as a JSON array\n"
    "  --tokenize-file P    print the token ids of the bytes of file P as a JSON array\n"
    "  -h, --help           this help\n"
    "\n"
    "Exit status: 0, 1 on an error (the message says what), 3 when a grammar's answer was cut\n"
    "by -n before it was a whole sentence of the grammar (the text printed is incomplete).\n"
    "\n"
    "nanoGPT's sample.py flags work too, as --flag VALUE or --flag=VALUE: --out_dir DIR (the model\n"
    "converted from DIR/ckpt.pt: a .gguf file in DIR), --start TEXT (or FILE:path, the prompt read\n"
    "from a file; default \"\\n\", as sample.py's), --num_samples N (N samples, each from the prompt,\n"
    "sample i with seed + i, each followed by a line of dashes), --max_new_tokens N, --temperature T,\n"
    "--top_k K, --seed S; --init_from resume, --device, --dtype and --compile are accepted (a note\n"
    "says what applies). Without a prompt, a prompt piped to stdin is read.\n";

struct Options {
    std::string model, prompt, prompt_ids, tokenize_text, tokenize_file;
    bool has_prompt = false, has_prompt_ids = false, has_tokenize = false, has_tokenize_file = false, json = false;
    int n_tokens = 256, top_k = 200, threads = 0, ctx = 0;
    float temperature = 0.8f;
    uint64_t seed = 1337;
    float top_p = 0.0f, min_p = 0.0f, repeat_penalty = 0.0f, presence_penalty = 0.0f, frequency_penalty = 0.0f; // 0 = off
    int repeat_last_n = 0;
    std::vector<std::string> stops;
    bool stop_at_eos = false;
    std::string grammar_file, grammar_text, json_schema_file;
    bool json_compact = false;
    bool sample_py = false;  // a flag only sample.py has: sample, never the REPL
    std::string out_dir;     // sample.py's --out_dir
    std::string choose; // --choose's options, '|' between them
    bool has_choose = false;
    std::string save_state, load_state, context_policy; // context_policy "": the mode's default
    int keep = -1;                                     // -1: not given
    int num_samples = 0;                               // sample.py's: 0 = not given (one, without the dashes)
};

// sample.py's --start: TEXT, or FILE:path for the contents of a file.
static std::string read_start(const std::string& start, Options* o) {
    if (start.rfind("FILE:", 0) != 0) {
        o->prompt = start;
    } else {
        std::ifstream f(start.substr(5), std::ios::binary);
        if (!f) return "--start: cannot open " + start.substr(5);
        o->prompt.assign(std::istreambuf_iterator<char>(f), {});
    }
    o->has_prompt = true;
    return "";
}

// sample.py's --device, --dtype and --compile: accepted, with a note of what applies here.
static void sample_py_note(const std::string& flag, const std::string& value) {
    if (flag == "--device")
        std::fprintf(stderr, "gpt2: --device %s: this program runs on the CPU (the library's CUDA path is for programs built with gpt2_cuda.cuh)\n", value.c_str());
    else if (flag == "--dtype")
        std::fprintf(stderr, "gpt2: --dtype %s: the weights run in the model file's type (convert with --dtype, or gpt2-quantize)\n", value.c_str());
    else
        std::fprintf(stderr, "gpt2: --compile %s: nothing to compile, the kernels are built in\n", value.c_str());
}

// sample.py's --out_dir: the .gguf beside DIR/ckpt.pt (ckpt.gguf first), or what to do.
static std::string model_in_out_dir(const std::string& dir, std::string* model) {
    std::vector<std::string> found;
    if (!cli_list_gguf(dir, &found)) return "--out_dir " + dir + ": cannot read the folder";
    for (const std::string& name : found)
        if (name == "ckpt.gguf") found = {name};
    if (found.size() == 1) {
        *model = dir + "/" + found[0];
        return "";
    }
    if (found.size() > 1) return "--out_dir " + dir + " holds several .gguf files; choose one with -m";
    if (std::ifstream(dir + "/ckpt.pt")) return "--out_dir " + dir + " has ckpt.pt but no model file: convert it first with\n    python3 tools/convert.py " + dir + "/ckpt.pt -o " + dir + "/ckpt.gguf";
    return "--out_dir " + dir + " has no ckpt.pt and no .gguf file";
}

static int fail(const std::string& message) {
    std::fprintf(stderr, "gpt2: %s\n", message.c_str());
    return 1;
}

// Returns an empty string on success, else the complaint.
static std::string parse_options(int argc, char** argv, Options* o) {
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i], given; // --flag=VALUE: `given` holds VALUE
        const size_t equals = a.find('=');
        const bool inline_value = a.rfind("--", 0) == 0 && equals != std::string::npos;
        if (inline_value) {
            given = a.substr(equals + 1);
            a.resize(equals);
        }
        auto value = [&](std::string* out) -> bool {
            if (inline_value) return *out = given, true;
            if (i + 1 >= argc) return false;
            *out = argv[++i];
            return true;
        };
        std::string v;
        if (a == "-h" || a == "--help") { std::fputs(usage, stdout); std::exit(0); }
        else if (a == "--json") o->json = true;
        else if (a == "--json-compact") o->json_compact = true;
        else if (a == "--stop-at-eos") o->stop_at_eos = true;
        else if (!value(&v)) return "unknown option '" + a + "' or missing value (see --help)";
        else if (a == "-m" || a == "--model") o->model = v;
        else if (a == "-p" || a == "--prompt") { o->prompt = v; o->has_prompt = true; }
        else if (a == "--start") { const std::string complaint = read_start(v, o); if (!complaint.empty()) return complaint; }
        else if (a == "--num_samples") { if (!cli_parse_int(v, 1, 1 << 20, &o->num_samples)) return "--num_samples expects an integer >= 1, got '" + v + "'"; o->sample_py = true; }
        else if (a == "--out_dir") { o->out_dir = v; o->sample_py = true; }
        else if (a == "--init_from") { if (v != "resume") return "--init_from " + v + ": only resume (a checkpoint in --out_dir) applies; for OpenAI's GPT-2 sizes convert a Hugging Face folder with tools/convert.py and give it with -m"; o->sample_py = true; }
        else if (a == "--device" || a == "--dtype" || a == "--compile") { sample_py_note(a, v); o->sample_py = true; }
        else if (a == "--prompt-ids") { o->prompt_ids = v; o->has_prompt_ids = true; }
        else if (a == "--tokenize") { o->tokenize_text = v; o->has_tokenize = true; }
        else if (a == "--tokenize-file") { o->tokenize_file = v; o->has_tokenize_file = true; }
        else if (a == "-n" || a == "--n-tokens" || a == "--max_new_tokens") { if (!cli_parse_int(v, 0, 1 << 24, &o->n_tokens)) return a + " expects 0 to 16777216, got '" + v + "'"; }
        else if (a == "--top-k" || a == "--top_k") { if (!cli_parse_int(v, 0, 1 << 30, &o->top_k)) return a + " expects an integer >= 0, got '" + v + "'"; }
        else if (a == "-t" || a == "--threads") { if (!cli_parse_int(v, 0, 1024, &o->threads)) return "--threads expects 0 to 1024, got '" + v + "'"; }
        else if (a == "--ctx") { if (!cli_parse_int(v, 0, 1 << 20, &o->ctx)) return "--ctx expects an integer >= 0, got '" + v + "'"; }
        else if (a == "--temp" || a == "--temperature") { if (!cli_parse_float(v, &o->temperature)) return a + " expects a number >= 0, got '" + v + "'"; }
        else if (a == "--seed") { if (!cli_parse_u64(v, &o->seed)) return "--seed expects an unsigned integer, got '" + v + "'"; }
        else if (a == "--top-p") { if (!cli_parse_float_in(v, 0.0f, 1.0f, &o->top_p)) return "--top-p expects a number from 0 to 1, got '" + v + "'"; }
        else if (a == "--min-p") { if (!cli_parse_float_in(v, 0.0f, 1.0f, &o->min_p)) return "--min-p expects a number from 0 to 1, got '" + v + "'"; }
        else if (a == "--repeat-penalty") { if (!cli_parse_float_in(v, 0.0f, FLT_MAX, &o->repeat_penalty)) return "--repeat-penalty expects a finite number >= 0, got '" + v + "'"; }
        else if (a == "--repeat-last-n") { if (!cli_parse_int(v, -1, 1 << 30, &o->repeat_last_n)) return "--repeat-last-n expects an integer >= -1, got '" + v + "'"; }
        else if (a == "--presence-penalty") { if (!cli_parse_float_in(v, -FLT_MAX, FLT_MAX, &o->presence_penalty)) return "--presence-penalty expects a finite number, got '" + v + "'"; }
        else if (a == "--frequency-penalty") { if (!cli_parse_float_in(v, -FLT_MAX, FLT_MAX, &o->frequency_penalty)) return "--frequency-penalty expects a finite number, got '" + v + "'"; }
        else if (a == "--save-state") o->save_state = v;
        else if (a == "--load-state") o->load_state = v;
        else if (a == "--context-policy") { if (v != "exact" && v != "discard") return "--context-policy expects exact or discard, got '" + v + "'"; o->context_policy = v; }
        else if (a == "--keep") { if (!cli_parse_int(v, 0, 1 << 30, &o->keep)) return "--keep expects an integer >= 0, got '" + v + "'"; }
        else if (a == "--grammar") o->grammar_file = v;
        else if (a == "--grammar-text") o->grammar_text = v;
        else if (a == "--json-schema") o->json_schema_file = v;
        else if (a == "--choose") { o->choose = v; o->has_choose = true; }
        else if (a == "--stop") { if (v.empty()) return "--stop expects a string of at least one character"; o->stops.push_back(v); }
        else return "unknown option '" + a + "' (see --help)";
    }
    if (o->has_prompt && o->has_prompt_ids) return "give -p (or --start) or --prompt-ids, not both";
    if (o->num_samples && o->json) return "--num_samples prints text; give it without --json";
    if (!o->grammar_file.empty() + !o->grammar_text.empty() + !o->json_schema_file.empty() > 1) return "give one of --grammar, --grammar-text and --json-schema";
    if (o->json_compact && o->json_schema_file.empty()) return "--json-compact shapes the JSON of --json-schema; give it with --json-schema";
    if (!o->out_dir.empty() && !o->model.empty()) return "give -m or --out_dir, not both";
    if (o->has_choose && (o->num_samples || !o->grammar_file.empty() || !o->grammar_text.empty() || !o->json_schema_file.empty()))
        return "--choose scores the options instead of generating; give it without --num_samples, --grammar, --grammar-text or --json-schema";
    return "";
}

static int tokenize(const gpt2_model* model, const std::string& text) {
    gpt2_error err;
    size_t n = 0;
    if (gpt2_tokenize(model, text.data(), text.size(), 0, nullptr, 0, &n, &err) != GPT2_OK) return fail(err.message);
    std::vector<int32_t> ids(n);
    gpt2_tokenize(model, text.data(), text.size(), 0, ids.data(), ids.size(), &n, &err);
    std::printf("%s\n", cli_json_ints(ids).c_str());
    return 0;
}

struct Printer {
    std::string text;
    bool echo;
    std::string prefix; // the prompt, shown once generation has started
};

static int on_token(void* user, int32_t, const char* text, size_t len) {
    Printer* p = (Printer*)user;
    if (p->echo && !p->prefix.empty()) {
        std::fputs(p->prefix.c_str(), stdout);
        p->prefix.clear();
    }
    if (text) {
        p->text.append(text, len);
        if (p->echo) {
            std::fwrite(text, 1, len, stdout);
            std::fflush(stdout);
        }
    }
    return 0;
}

// --choose: the options scored after the context, the most likely printed (with --json, every
// option's log-probability too). The session is left as it was, so --save-state saves the prompt.
static int choose(gpt2_session* session, const Options& o, const std::vector<int32_t>& prompt) {
    const std::vector<std::string> options = cli_split_options(o.choose);
    std::vector<const char*> ptrs;
    for (const std::string& option : options) ptrs.push_back(option.c_str());
    std::vector<float> logprobs(options.size());
    size_t best = 0;
    gpt2_error err;
    if (gpt2_choose(session, ptrs.data(), ptrs.size(), logprobs.data(), &best, &err) != GPT2_OK) return fail("--choose: " + std::string(err.message));
    if (!o.json) {
        std::printf("%s\n", options[best].c_str());
        return 0;
    }
    std::string names = "[";
    for (size_t i = 0; i < options.size(); i++) names += (i ? "," : "") + cli_json_string(options[i]);
    std::printf("{\"prompt_ids\":%s,\"options\":%s],\"logprobs\":%s,\"best\":%zu,\"choice\":%s}\n", cli_json_ints(prompt).c_str(), names.c_str(),
                cli_json_floats(logprobs).c_str(), best, cli_json_string(options[best]).c_str());
    return 0;
}

// sample.py's --num_samples: each sample from the prompt (evaluated in `session`, whose state is
// restored before each), seed + i for sample i, the prompt and the text printed, then dashes.
static int samples(gpt2_session* session, gpt2_generate_params gp, const Options& o) {
    gpt2_error err;
    size_t size = 0;
    if (gpt2_session_save(session, nullptr, 0, &size, &err) != GPT2_OK) return fail(err.message);
    std::vector<uint8_t> prompted(size);
    if (gpt2_session_save(session, prompted.data(), prompted.size(), &size, &err) != GPT2_OK) return fail(err.message);
    for (int i = 0; i < o.num_samples; i++) {
        if (gpt2_session_load(session, prompted.data(), prompted.size(), &err) != GPT2_OK) return fail(err.message);
        Printer printer{"", true, o.prompt};
        gp.on_token = on_token;
        gp.user = &printer;
        gp.seed = o.seed + (uint64_t)i;
        if (o.n_tokens > 0 && gpt2_generate(session, nullptr, 0, &gp, nullptr, 0, nullptr, &err) != GPT2_OK) return fail(err.message);
        if (!printer.prefix.empty()) std::fputs(printer.prefix.c_str(), stdout);
        std::printf("\n---------------\n");
    }
    return 0;
}

int main(int argc, char** argv) {
    Options o;
    std::string complaint = parse_options(argc, argv, &o);
    if (!complaint.empty()) return fail(complaint);
    if (!o.out_dir.empty()) {
        complaint = model_in_out_dir(o.out_dir, &o.model);
        if (!complaint.empty()) return fail(complaint);
    }
    if (o.model.empty()) o.model = cli_default_model(argv[0]);
    if (o.model.empty()) return fail("no model given and the shipped model was not found; use -m MODEL");

    gpt2_error err;
    gpt2_model* model = nullptr;
    if (gpt2_model_load_file(o.model.c_str(), nullptr, &model, &err) != GPT2_OK) return fail(err.message);
    CliModel owner{model};
    const gpt2_model_info info = gpt2_model_get_info(model);

    if (o.has_tokenize) return tokenize(model, o.tokenize_text);
    if (o.has_tokenize_file) {
        std::ifstream f(o.tokenize_file, std::ios::binary);
        if (!f) return fail("cannot open " + o.tokenize_file);
        return tokenize(model, std::string(std::istreambuf_iterator<char>(f), {}));
    }

    // No prompt and no saved conversation to continue: a prompt piped to stdin (as sample.py
    // users pipe one), else the REPL, where long chats want the discard policy (one
    // recomputation per half context instead of one per token).
    if (!o.has_prompt && !o.has_prompt_ids && o.load_state.empty() && !cli_stdin_is_terminal()) {
        char buffer[4096];
        for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, stdin)) > 0;) o.prompt.append(buffer, n);
        o.has_prompt = !o.prompt.empty();
    }
    // Nothing to start from where sample.py would sample (its flags, or nothing piped): its "\n".
    if (!o.has_prompt && !o.has_prompt_ids && o.load_state.empty() && (o.sample_py || !cli_stdin_is_terminal())) {
        o.prompt = "\n";
        o.has_prompt = true;
    }
    const bool repl = !o.has_prompt && !o.has_prompt_ids && o.load_state.empty();
    if (repl && o.has_choose) return fail("--choose needs a context to continue: give -p, --prompt-ids or --load-state");
    if (repl && !o.save_state.empty()) return fail("--save-state needs -p, --prompt-ids or --load-state; in the REPL use /save FILE");
    const std::string policy = !o.context_policy.empty() ? o.context_policy : repl ? "discard" : "exact";
    if (o.keep >= 0 && policy != "discard") return fail("--keep needs --context-policy discard");

    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = o.threads;
    sp.n_ctx = o.ctx;
    sp.context_policy = policy == "discard" ? GPT2_CONTEXT_DISCARD : GPT2_CONTEXT_EXACT;
    sp.n_keep = o.keep > 0 ? o.keep : 0;
    gpt2_session* session = nullptr;
    if (gpt2_session_create(model, &sp, &session, &err) != GPT2_OK) return fail(err.message);
    CliSession session_owner{session};

    gpt2_generate_params gp = gpt2_generate_default_params();
    gp.max_new_tokens = o.n_tokens;
    gp.temperature = o.temperature;
    gp.top_k = o.top_k;
    gp.seed = o.seed;
    gp.top_p = o.top_p;
    gp.min_p = o.min_p;
    gp.repeat_penalty = o.repeat_penalty;
    gp.repeat_last_n = o.repeat_last_n;
    gp.presence_penalty = o.presence_penalty;
    gp.frequency_penalty = o.frequency_penalty;
    std::vector<const char*> stops;
    for (const std::string& stop : o.stops) stops.push_back(stop.c_str());
    gp.stop = stops.data();
    gp.n_stop = stops.size();
    gp.stop_at_eos = o.stop_at_eos;
    CliGrammar grammar;
    if (!o.grammar_file.empty() || !o.grammar_text.empty())
        complaint = cli_make_grammar(model, CliGrammarKind::gbnf, o.grammar_text.empty() ? nullptr : o.grammar_text.c_str(), o.grammar_file, &grammar.grammar);
    else if (!o.json_schema_file.empty())
        complaint = cli_make_grammar(model, CliGrammarKind::json_schema, nullptr, o.json_schema_file, &grammar.grammar, o.json_compact);
    if (!complaint.empty()) return fail(complaint);
    gp.grammar = grammar.grammar;
    gpt2_match grammar_match = GPT2_MATCH_NONE;
    gp.grammar_match = &grammar_match;
    gpt2_end end = GPT2_END_MAX_TOKENS;
    gp.end = &end;

    if (repl) return cli_repl(model, session, gp, o.ctx > 0 ? o.ctx : gpt2_model_get_info(model).n_ctx);
    if (!o.load_state.empty()) {
        complaint = cli_load_state(session, o.load_state);
        if (!complaint.empty()) return fail(complaint);
    }

    std::vector<int32_t> prompt;
    if (o.has_prompt_ids) {
        if (!cli_parse_ids(o.prompt_ids, &prompt)) return fail("--prompt-ids expects comma-separated integers, got '" + o.prompt_ids + "'");
    } else if (o.has_prompt) {
        size_t n = 0;
        if (gpt2_tokenize(model, o.prompt.data(), o.prompt.size(), 0, nullptr, 0, &n, &err) != GPT2_OK) return fail(err.message);
        prompt.resize(n);
        gpt2_tokenize(model, o.prompt.data(), o.prompt.size(), 0, prompt.data(), prompt.size(), &n, &err);
    }
    if (prompt.empty() && gpt2_session_n_tokens(session) == 0) return fail("the prompt is empty: give at least one token");

    // Evaluate the prompt first so its last logits can be reported, then generate from there.
    if (!prompt.empty() && gpt2_session_eval(session, prompt.data(), prompt.size(), &err) != GPT2_OK) return fail(err.message);
    std::vector<float> last_logits;
    if (const float* logits = gpt2_session_logits(session)) last_logits.assign(logits, logits + info.n_vocab);

    if (o.num_samples) return samples(session, gp, o);
    if (o.has_choose) {
        const int result = choose(session, o, prompt);
        if (result == 0 && !o.save_state.empty()) {
            complaint = cli_save_state(session, o.save_state);
            if (!complaint.empty()) return fail(complaint);
        }
        return result;
    }
    Printer printer{"", !o.json, o.has_prompt ? o.prompt : ""};
    gp.on_token = on_token;
    gp.user = &printer;
    std::vector<int32_t> ids((size_t)o.n_tokens);
    size_t produced = 0;
    if (o.n_tokens > 0) { // -n 0: the prompt only, evaluated above
        if (gpt2_generate(session, nullptr, 0, &gp, ids.data(), ids.size(), &produced, &err) != GPT2_OK) return fail(err.message);
    } else if (printer.echo) {
        std::fputs(printer.prefix.c_str(), stdout);
    }
    ids.resize(produced);
    if (!o.save_state.empty()) {
        complaint = cli_save_state(session, o.save_state);
        if (!complaint.empty()) return fail(complaint);
    }
    // A grammar's answer that -n cut is not one the caller can parse: say so, and exit 3.
    const bool incomplete = gp.grammar && o.n_tokens > 0 && grammar_match != GPT2_MATCH_COMPLETE;
    if (!o.json) {
        std::printf("\n");
    } else {
        std::string out = "{\"prompt_ids\":" + cli_json_ints(prompt) + ",\"ids\":" + cli_json_ints(ids);
        if (info.tokenizer != GPT2_TOKENIZER_NONE) out += ",\"text\":" + cli_json_string(printer.text);
        out += std::string(",\"end\":\"") + gpt2_end_string(end) + "\"";
        if (gp.grammar) out += std::string(",\"grammar_complete\":") + (grammar_match == GPT2_MATCH_COMPLETE ? "true" : "false");
        out += ",\"last_logits\":" + cli_json_floats(last_logits) + "}";
        std::printf("%s\n", out.c_str());
    }
    if (!incomplete) return 0;
    std::fprintf(stderr, "gpt2: the answer is incomplete: -n %d tokens ended it before it was a whole sentence of the grammar (give a larger -n)\n", o.n_tokens);
    return 3;
}
