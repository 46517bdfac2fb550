// The interactive REPL of the gpt2 program: type a prompt, watch the tokens stream.
#include "cli.h"
#include "line_editor.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <string>

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
    "The conversation accumulates until /reset; older text slides out of the model's context.\n"
    "  /temp T    temperature (0 = greedy)      /topk K   top-k (0 = all)\n"
    "  /seed S    random seed                   /n N      tokens per answer\n"
    "  /reset     forget the conversation       /help     this text\n"
    "  /quit      leave (also Ctrl-D)           Ctrl-C    stop the current answer\n"
    "Line editing: left/right, Home/End, Backspace/Delete, up/down for history, Ctrl-U clears.\n";

// Applies a /command; returns false for /quit.
static bool command(const std::string& line, gpt2_session* session, gpt2_generate_params* p) {
    size_t space = line.find(' ');
    std::string name = line.substr(0, space), arg = space == std::string::npos ? "" : line.substr(space + 1);
    while (!arg.empty() && arg.back() == ' ') arg.pop_back();
    if (name == "/quit" || name == "/exit") return false;
    if (name == "/help") std::fputs(repl_help, stdout);
    else if (name == "/reset") { gpt2_session_reset(session); std::printf("(conversation cleared)\n"); }
    else if (name == "/temp") {
        float t;
        if (cli_parse_float(arg, &t) && std::isfinite(t) && t >= 0) { p->temperature = t; std::printf("(temperature %g)\n", (double)t); }
        else std::printf("/temp expects a number >= 0, e.g. /temp 0.8\n");
    } else if (name == "/topk") {
        if (cli_parse_int(arg, 0, 1 << 30, &p->top_k)) std::printf("(top-k %d)\n", p->top_k);
        else std::printf("/topk expects an integer >= 0, e.g. /topk 200\n");
    } else if (name == "/seed") {
        if (cli_parse_u64(arg, &p->seed)) std::printf("(seed %llu)\n", (unsigned long long)p->seed);
        else std::printf("/seed expects an unsigned integer, e.g. /seed 1337\n");
    } else if (name == "/n") {
        if (cli_parse_int(arg, 1, 1 << 24, &p->max_new_tokens)) std::printf("(%d tokens per answer)\n", p->max_new_tokens);
        else std::printf("/n expects an integer from 1, e.g. /n 200\n");
    } else {
        std::printf("unknown command '%s'; /help lists them\n", name.c_str());
    }
    return true;
}

int cli_repl(gpt2_model* model, gpt2_session* session, gpt2_generate_params params) {
    const gpt2_model_info info = gpt2_model_get_info(model);
    catch_interrupts();
    std::printf("gpt2.h REPL - model '%s' (%d layers, n_embd %d, context %d; temperature %g, top-k %d).\n"
                "Type a prompt, or /help for commands.\n",
                info.name, info.n_layer, info.n_embd, info.n_ctx, (double)params.temperature, params.top_k);
    LineEditor editor;
    std::string line;
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
            if (!command(line, session, &params)) return 0;
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
        std::fputs(line.c_str(), stdout); // the prompt, then its continuation
        stream.start = std::chrono::steady_clock::now();
        gpt2_result r;
        {
            QuietInput quiet;
            r = gpt2_generate(session, ids.data(), ids.size(), &params, nullptr, 0, nullptr, &err);
        }
        const auto end = std::chrono::steady_clock::now();
        if (r != GPT2_OK) {
            std::printf("\n%s\n", err.message);
            continue;
        }
        const double ttft_ms = std::chrono::duration<double, std::milli>(stream.first_token - stream.start).count();
        const double decode_s = std::chrono::duration<double>(end - stream.first_token).count();
        std::printf("\n[%d tokens, %.1f tokens/s, first token after %.0f ms%s]\n", stream.n_tokens,
                    stream.n_tokens > 1 && decode_s > 0 ? (stream.n_tokens - 1) / decode_s : 0.0,
                    stream.n_tokens ? ttft_ms : 0.0, interrupted ? ", stopped by Ctrl-C" : "");
    }
}
