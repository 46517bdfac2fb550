// The interactive REPL of the gpt2 program: type a prompt, watch the tokens stream.
#include "cli.h"
#include "line_editor.h"

#include <algorithm>
#include <cfloat>
#include <atomic>
#include <chrono>
#include <csignal>
#include <string>
#include <utility>
#include <vector>

// Ctrl-C while the model writes: SIGINT sets this flag and the token callback stops generation.
// At the prompt the line editor reads Ctrl-C as a key instead (the terminal is in raw mode).
static std::atomic<bool> interrupted{false};

static void on_interrupt(int) {
    interrupted = true;
#if defined(_WIN32)
    std::signal(SIGINT, on_interrupt); // Windows resets the handler on each signal
#endif
}

static void catch_interrupts() {
#if defined(_WIN32)
    std::signal(SIGINT, on_interrupt);
#else
    struct sigaction sa = {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; // no SA_RESTART: a blocking read returns, so Ctrl-C is seen without raw mode too
    sigaction(SIGINT, &sa, nullptr);
#endif
}

struct Stream {
    std::chrono::steady_clock::time_point start, first_token;
    int n_tokens = 0;
};

static int stream_token(void* user, int32_t token, const char* text, size_t len) {
    Stream* s = (Stream*)user;
    if (token >= 0 && s->n_tokens++ == 0) s->first_token = std::chrono::steady_clock::now();
    if (text) std::fwrite(text, 1, len, stdout);
    else std::printf(" %d", (int)token);
    std::fflush(stdout);
    return interrupted ? 1 : 0; // Ctrl-C stops this answer, not the program
}

static const char* repl_help =
    "Type a prompt and press Enter; the model continues it (an empty line continues from a newline).\n"
    "The conversation accumulates until /reset. When it fills the model's context, the older half\n"
    "of it goes at once (the discard policy), so answers stay fast (--context-policy exact: the\n"
    "oldest token goes at each new token and the rest is recomputed, nanoGPT's way; --keep N: the\n"
    "first N tokens always stay).\n"
    "  /temp T    temperature (0 = greedy)      /topk K   top-k (0 = all)\n"
    "  /top-p P   top-p, 0 to 1 (0 = off)       /min-p P  min-p, 0 to 1 (0 = off)\n"
    "  /repeat-penalty X  divide the logits of recent tokens by X (1 or 0 = off)\n"
    "  /repeat-last-n N   how many recent tokens the penalties look at (0 = 64, -1 = the context)\n"
    "  /presence-penalty X, /frequency-penalty X  subtract X once / X per use from used tokens\n"
    "  /seed S    random seed                   /n N      tokens per answer\n"
    "  /choose A|B|C  which option the model finds the likeliest continuation of the conversation\n"
    "             (each option's log-probability; the conversation is unchanged; \\n: a newline)\n"
    "  /reset     forget the conversation       /help     this text\n"
    "  /undo      back to before the last prompt and its answer (again: the turn before), even when\n"
    "             the answer filled the context and older tokens were dropped\n"
    "  /save FILE save the conversation         /load FILE continue a saved one\n"
    "  /stop STR  end answers where STR appears, STR not shown (\\n: a newline); /stop alone: none\n"
    "  /grammar FILE  answers follow the GBNF grammar in FILE (docs/GRAMMARS.md); /grammar alone: none\n"
    "  /json FILE answers are JSON that the JSON Schema in FILE accepts; /json alone: none\n"
    "  /json-compact FILE  the same, with no whitespace between JSON's tokens\n"
    "  /quit      leave (also Ctrl-D)           Ctrl-C    stop the current answer\n"
    "Line editing: left/right, Home/End, Backspace/Delete, up/down for history, Ctrl-U clears.\n";

// The stop strings of /stop; the generation params point into them.
static std::vector<std::string> stop_strings;
static std::vector<const char*> stop_pointers;

static void set_stops(gpt2_generate_params* p, std::vector<std::string> stops) {
    stop_strings = std::move(stops);
    stop_pointers.clear();
    for (const std::string& s : stop_strings) stop_pointers.push_back(s.c_str());
    p->stop = stop_pointers.data();
    p->n_stop = stop_pointers.size();
}

// The grammar of /grammar (or --grammar); the generation params point at it.
static CliGrammar repl_grammar;

// "\n" and "\t" become a newline and a tab, "\\" a backslash; `show` turns them back.
static std::string unescape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'n' || s[i + 1] == 't' || s[i + 1] == '\\')) {
            out += s[i + 1] == 'n' ? '\n' : s[i + 1] == 't' ? '\t' : '\\';
            i++;
        } else {
            out += s[i];
        }
    }
    return out;
}

static std::string show(const std::string& s) {
    std::string out = "\"";
    for (char c : s) out += c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\\' ? "\\\\" : std::string(1, c);
    return out + "\"";
}

// /undo's record of the turns (a prompt and its answer), oldest first. A turn that cannot reach
// the end of the context is undone by truncating to the tokens before it. One that may (its
// prompt and max_new_tokens would pass n_ctx, so the context policy drops older tokens during
// it) keeps the session's state from before it, saved: truncation cannot bring dropped tokens
// back. The saved states are bounded: past undo_budget bytes the oldest turns are forgotten.
struct Turn {
    size_t n_before;                  // tokens in context before the turn
    std::vector<unsigned char> state; // the session before the turn, when the turn may overflow
};

struct UndoHistory {
    std::vector<Turn> turns;
    size_t bytes = 0;    // of the saved states
    bool forgot = false; // older turns were dropped to stay within the budget
    static constexpr size_t undo_budget = size_t(256) << 20;

    void clear() { turns.clear(), bytes = 0, forgot = false; }
    void push(Turn turn) {
        bytes += turn.state.size();
        turns.push_back(std::move(turn));
        while (bytes > undo_budget && turns.size() > 1) {
            bytes -= turns.front().state.size();
            turns.erase(turns.begin());
            forgot = true;
        }
    }
};

// The record of a turn about to start: the state is saved when the prompt and answer may pass
// the context. Empty state when the save fails too (undo then truncates, as before).
static Turn begin_turn(const gpt2_session* session, size_t n_ctx, size_t n_prompt, int max_new_tokens) {
    Turn turn{gpt2_session_n_tokens(session), {}};
    if (turn.n_before + n_prompt + (size_t)max_new_tokens <= n_ctx) return turn;
    size_t bytes = 0;
    gpt2_error err;
    if (gpt2_session_save(session, nullptr, 0, &bytes, &err) != GPT2_OK) return turn;
    turn.state.resize(bytes);
    if (gpt2_session_save(session, turn.state.data(), bytes, &bytes, &err) != GPT2_OK) turn.state.clear();
    return turn;
}

static void undo(gpt2_session* session, UndoHistory* history) {
    if (history->turns.empty()) {
        if (history->forgot) std::printf("(nothing more to undo: older turns were forgotten, their saved states past %zu MB)\n", UndoHistory::undo_budget >> 20);
        else std::printf("(nothing to undo)\n");
        return;
    }
    Turn turn = std::move(history->turns.back());
    history->turns.pop_back();
    history->bytes -= turn.state.size();
    gpt2_error err;
    const gpt2_result r = !turn.state.empty() ? gpt2_session_load(session, turn.state.data(), turn.state.size(), &err)
                                              : gpt2_session_truncate(session, std::min(turn.n_before, gpt2_session_n_tokens(session)), &err);
    if (r != GPT2_OK) std::printf("%s\n", err.message);
    else std::printf("(dropped the last answer and its prompt: %zu tokens in context)\n", gpt2_session_n_tokens(session));
}

// /choose A|B|C: each option's log-probability as a continuation of the conversation, and the
// likeliest (gpt2_choose leaves the session as it was). \n in an option is a newline, as in /stop.
static void choose(gpt2_session* session, const std::string& arg) {
    if (arg.empty()) {
        std::printf("/choose expects options split at |, e.g. /choose  yes| no\n");
        return;
    }
    const std::vector<std::string> options = cli_split_options(unescape(arg));
    std::vector<const char*> pointers;
    for (const std::string& option : options) pointers.push_back(option.c_str());
    std::vector<float> logprobs(options.size());
    size_t best = 0;
    gpt2_error err;
    if (gpt2_choose(session, pointers.data(), pointers.size(), logprobs.data(), &best, &err) != GPT2_OK) {
        std::printf("/choose: %s\n", err.message);
        return;
    }
    for (size_t i = 0; i < options.size(); i++) std::printf("  %s %.4f\n", show(options[i]).c_str(), (double)logprobs[i]);
    std::printf("(the likeliest: %s)\n", show(options[best]).c_str());
}

// Applies a /command; returns false for /quit.
static bool command(const std::string& line, const gpt2_model* model, gpt2_session* session, gpt2_generate_params* p, UndoHistory* history) {
    size_t space = line.find(' ');
    std::string name = line.substr(0, space), arg = space == std::string::npos ? "" : line.substr(space + 1);
    while (!arg.empty() && arg.back() == ' ') arg.pop_back();
    if (name == "/quit" || name == "/exit") return false;
    if (name == "/help") std::fputs(repl_help, stdout);
    else if (name == "/reset") { gpt2_session_reset(session); history->clear(); std::printf("(conversation cleared)\n"); }
    else if (name == "/undo") {
        undo(session, history);
    } else if (name == "/save" || name == "/load") {
        if (arg.empty()) {
            std::printf("%s expects a file name, e.g. %s chat.state\n", name.c_str(), name.c_str());
            return true;
        }
        const bool save = name == "/save";
        const std::string complaint = save ? cli_save_state(session, arg) : cli_load_state(session, arg);
        if (!complaint.empty()) {
            std::printf("%s%s\n", complaint.c_str(), save ? "" : " (the conversation is unchanged)");
            return true;
        }
        if (!save) history->clear(); // the loaded conversation is where /undo stops
        std::printf("(%s %zu tokens %s %s)\n", save ? "saved" : "loaded", gpt2_session_n_tokens(session), save ? "to" : "from", arg.c_str());
    } else if (name == "/temp") {
        float t;
        if (cli_parse_float(arg, &t) && std::isfinite(t) && t >= 0) { p->temperature = t; std::printf("(temperature %g)\n", (double)t); }
        else std::printf("/temp expects a number >= 0, e.g. /temp 0.8\n");
    } else if (name == "/topk") {
        if (cli_parse_int(arg, 0, 1 << 30, &p->top_k)) std::printf("(top-k %d)\n", p->top_k);
        else std::printf("/topk expects an integer >= 0, e.g. /topk 200\n");
    } else if (name == "/top-p" || name == "/min-p") {
        float* value = name == "/top-p" ? &p->top_p : &p->min_p;
        if (cli_parse_float_in(arg, 0.0f, 1.0f, value)) std::printf("(%s %g)\n", name.c_str() + 1, (double)*value);
        else std::printf("%s expects a number from 0 to 1 (0 = off), e.g. %s 0.9\n", name.c_str(), name.c_str());
    } else if (name == "/repeat-penalty") {
        if (cli_parse_float_in(arg, 0.0f, FLT_MAX, &p->repeat_penalty)) std::printf("(repeat-penalty %g)\n", (double)p->repeat_penalty);
        else std::printf("/repeat-penalty expects a number >= 0 (1 or 0 = off), e.g. /repeat-penalty 1.1\n");
    } else if (name == "/repeat-last-n") {
        if (cli_parse_int(arg, -1, 1 << 30, &p->repeat_last_n)) std::printf("(repeat-last-n %d)\n", p->repeat_last_n);
        else std::printf("/repeat-last-n expects an integer >= -1 (0 = 64, -1 = the whole context), e.g. /repeat-last-n 64\n");
    } else if (name == "/presence-penalty" || name == "/frequency-penalty") {
        float* value = name == "/presence-penalty" ? &p->presence_penalty : &p->frequency_penalty;
        if (cli_parse_float_in(arg, -FLT_MAX, FLT_MAX, value)) std::printf("(%s %g)\n", name.c_str() + 1, (double)*value);
        else std::printf("%s expects a finite number (0 = off), e.g. %s 0.5\n", name.c_str(), name.c_str());
    } else if (name == "/choose") {
        choose(session, arg);
    } else if (name == "/seed") {
        if (cli_parse_u64(arg, &p->seed)) std::printf("(seed %llu)\n", (unsigned long long)p->seed);
        else std::printf("/seed expects an unsigned integer, e.g. /seed 1337\n");
    } else if (name == "/stop") {
        std::vector<std::string> stops;
        if (!arg.empty()) {
            stops.assign(p->stop, p->stop + p->n_stop); // those of --stop, then of /stop
            stops.push_back(unescape(arg));
        }
        set_stops(p, stops);
        std::string list;
        for (const std::string& s : stop_strings) list += (list.empty() ? "" : ", ") + show(s);
        std::printf("(%s)\n", list.empty() ? "no stop strings" : ("answers stop at " + list).c_str());
    } else if (name == "/grammar" || name == "/json" || name == "/json-compact") {
        if (arg.empty()) {
            gpt2_grammar_free(repl_grammar.grammar);
            repl_grammar.grammar = nullptr;
            p->grammar = nullptr;
            std::printf("(no grammar: answers are free text)\n");
            return true;
        }
        const bool schema = name != "/grammar";
        const std::string complaint = cli_make_grammar(model, schema ? CliGrammarKind::json_schema : CliGrammarKind::gbnf, nullptr, arg, &repl_grammar.grammar,
                                                       name == "/json-compact");
        if (!complaint.empty()) {
            std::printf("%s (the grammar is unchanged)\n", complaint.c_str());
            return true;
        }
        p->grammar = repl_grammar.grammar;
        std::printf(schema ? "(answers are JSON that the schema in %s accepts)\n" : "(answers follow the grammar in %s)\n", arg.c_str());
    } else if (name == "/n") {
        if (cli_parse_int(arg, 1, 1 << 24, &p->max_new_tokens)) std::printf("(%d tokens per answer)\n", p->max_new_tokens);
        else std::printf("/n expects an integer from 1, e.g. /n 200\n");
    } else {
        std::printf("unknown command '%s'; /help lists them\n", name.c_str());
    }
    return true;
}

// How an answer ended, for the line after it ("" when it ran to /n tokens of free text).
static std::string turn_end(gpt2_end why, bool grammar_incomplete, int max_new_tokens) {
    switch (why) {
    case GPT2_END_GRAMMAR: return ", the grammar's sentence is whole";
    case GPT2_END_STOP: return ", stopped at a stop string";
    case GPT2_END_EOS: return ", ended at <|endoftext|>";
    case GPT2_END_CALLBACK: case GPT2_END_ABORTED: return ", stopped";
    case GPT2_END_ERROR: return ", failed";
    case GPT2_END_MAX_TOKENS: break;
    }
    if (!grammar_incomplete) return "";
    return ", cut at /n " + std::to_string(max_new_tokens) + " tokens: not yet a whole sentence of the grammar (incomplete)";
}

int cli_repl(gpt2_model* model, gpt2_session* session, gpt2_generate_params params, int n_ctx) {
    const gpt2_model_info info = gpt2_model_get_info(model);
    catch_interrupts();
    const std::string of_model = n_ctx == info.n_ctx ? "" : " of the model's " + std::to_string(info.n_ctx);
    std::printf("gpt2.h REPL - model '%s' (%d layers, n_embd %d, context %d%s; temperature %g, top-k %d).\n"
                "Type a prompt, or /help for commands.\n",
                info.name, info.n_layer, info.n_embd, n_ctx, of_model.c_str(), (double)params.temperature, params.top_k);
    LineEditor editor;
    std::string line;
    UndoHistory history;
    for (;;) {
        interrupted = false;
        LineResult got = editor.read("> ", &line);
        if (got == LineResult::EndOfInput) return 0;
        if (got == LineResult::Interrupted || interrupted) {
            std::printf("(Ctrl-C stops an answer; /quit or Ctrl-D leaves)\n");
            continue;
        }
        editor.add_history(line);
        if (!line.empty() && line[0] == '/') {
            if (!command(line, model, session, &params, &history)) return 0;
            continue;
        }
        if (line.empty()) line = "\n";
        size_t n = 0;
        gpt2_error err;
        if (gpt2_tokenize(model, line.data(), line.size(), 0, nullptr, 0, &n, &err) != GPT2_OK) {
            std::printf("cannot use this prompt with this model: %s\n", err.message);
            continue;
        }
        std::vector<int32_t> ids(n);
        gpt2_tokenize(model, line.data(), line.size(), 0, ids.data(), n, &n, &err);

        Stream stream;
        params.on_token = stream_token;
        params.user = &stream;
        gpt2_end why = GPT2_END_MAX_TOKENS;
        gpt2_match match = GPT2_MATCH_NONE;
        params.end = &why;
        params.grammar_match = &match;
        std::fputs(line.c_str(), stdout); // the prompt, then its continuation
        stream.start = std::chrono::steady_clock::now();
        Turn turn = begin_turn(session, (size_t)n_ctx, ids.size(), params.max_new_tokens);
        gpt2_result r;
        size_t n_generated = 0;
        {
            QuietInput quiet;
            r = gpt2_generate(session, ids.data(), ids.size(), &params, nullptr, 0, &n_generated, &err);
        }
        const auto end = std::chrono::steady_clock::now();
        if (r != GPT2_OK) {
            std::printf("\n%s\n", err.message);
            continue;
        }
        history.push(std::move(turn));
        const double ttft_ms = std::chrono::duration<double, std::milli>(stream.first_token - stream.start).count();
        const double decode_s = std::chrono::duration<double>(end - stream.first_token).count();
        const std::string ended = interrupted ? ", stopped by Ctrl-C" : turn_end(why, params.grammar && match != GPT2_MATCH_COMPLETE, params.max_new_tokens);
        std::printf("\n[%d tokens, %.1f tokens/s, first token after %.0f ms%s]\n", stream.n_tokens,
                    stream.n_tokens > 1 && decode_s > 0 ? (stream.n_tokens - 1) / decode_s : 0.0,
                    stream.n_tokens ? ttft_ms : 0.0, ended.c_str());
    }
}
