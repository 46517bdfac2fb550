// gpt2-soak: a long run of many sessions on one model, checking that nothing leaks or drifts.
//
//   gpt2-soak MODEL [--tokens N] [--sessions S] [--threads T] [--rss-bound-kib K]
//
// S sessions (default 4) share one model. Each runs rounds: reset, a 3-token prompt, then
// generation a few tokens past its context (so every round crosses n_ctx and the session drops
// and recomputes its window), continued in a second generate call. Odd sessions use half the
// model's context. Together they generate N tokens (default 100000).
//
// The run happens twice: first with every session in its own thread and T worker threads each
// (default 2), in 10 phases with the resident memory (/proc/self/statm) measured after each;
// then all sessions one after the other on one thread with one worker. It fails (exit 1) when
//   - the resident memory after any phase exceeds the one after the first phase (the warm-up)
//     by more than K KiB (default 4096), or
//   - any session's tokens (a 64-bit FNV-1a hash of its whole stream) differ between the runs.
// tests/CMakeLists.txt registers a short run (soak_short); docs/RELIABILITY.md has the long one.
#define GPT2_IMPLEMENTATION
#include "gpt2.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

static size_t rss_bytes() {
    FILE* f = std::fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, resident = 0;
    if (std::fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
    std::fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

struct Soaker {
    gpt2_session* session = nullptr;
    int index = 0;
    int n_ctx = 0;
    int n_vocab = 0;
    long round = 0;
    long tokens = 0;
    long crossings = 0; // generated tokens that pushed the window past n_ctx
    uint64_t hash = 1469598103934665603ull;
    bool failed = false;
    std::string error;

    static int on_token(void* user, int32_t token, const char*, size_t) {
        Soaker* s = (Soaker*)user;
        if (token >= 0) {
            s->hash = (s->hash ^ (uint64_t)(uint32_t)token) * 1099511628211ull;
            s->tokens++;
        }
        return 0;
    }

    // One round: reset, prompt, generate past the context in two calls.
    bool run_round() {
        gpt2_session_reset(session);
        const int32_t prompt[3] = {(int32_t)(index % n_vocab), (int32_t)((round * 7 + 1) % n_vocab), (int32_t)((round * 13 + index) % n_vocab)};
        const int over = 1 + (int)(round % 4); // tokens past the context
        const int total = n_ctx - 3 + over;
        const int first = total / 2;
        gpt2_generate_params p = gpt2_generate_default_params();
        p.on_token = on_token;
        p.user = this;
        p.seed = (uint64_t)index * 1000003u + (uint64_t)round;
        p.temperature = round % 3 == 0 ? 0.0f : 1.0f; // greedy sometimes: long repeats are a case too
        p.top_k = (int)(round % 5) * 50;              // 0 (all), 50, 100, ...: above the vocabulary is clamped
        p.max_new_tokens = first;
        gpt2_error err;
        if (gpt2_generate(session, prompt, 3, &p, nullptr, 0, nullptr, &err) != GPT2_OK) return fail(err);
        p.seed += 7;
        p.max_new_tokens = total - first;
        if (gpt2_generate(session, nullptr, 0, &p, nullptr, 0, nullptr, &err) != GPT2_OK) return fail(err); // continues
        if (gpt2_session_n_tokens(session) != (size_t)n_ctx) {
            error = "context holds " + std::to_string(gpt2_session_n_tokens(session)) + " tokens, expected " + std::to_string(n_ctx);
            failed = true;
            return false;
        }
        crossings += over;
        round++;
        return true;
    }
    bool fail(const gpt2_error& err) {
        error = err.message;
        failed = true;
        return false;
    }
};

struct Run {
    std::vector<Soaker> soakers;
    double seconds = 0;
    std::vector<size_t> rss; // after each phase
};

static bool create_sessions(gpt2_model* model, int n_sessions, int n_threads, Run* run) {
    const gpt2_model_info info = gpt2_model_get_info(model);
    run->soakers.resize((size_t)n_sessions);
    for (int i = 0; i < n_sessions; i++) {
        Soaker& s = run->soakers[(size_t)i];
        s.index = i;
        s.n_vocab = info.n_vocab;
        s.n_ctx = i % 2 ? std::max(8, info.n_ctx / 2) : info.n_ctx;
        gpt2_session_params p = gpt2_session_default_params();
        p.n_threads = n_threads;
        p.n_ctx = s.n_ctx;
        gpt2_error err;
        if (gpt2_session_create(model, &p, &s.session, &err) != GPT2_OK) {
            std::fprintf(stderr, "gpt2-soak: session %d: %s\n", i, err.message);
            return false;
        }
    }
    return true;
}

// Each session generates until it has `target` tokens; phases split the work for measurements.
static bool soak(gpt2_model* model, long tokens_per_session, int n_sessions, int n_threads, bool parallel, Run* run) {
    if (!create_sessions(model, n_sessions, parallel ? n_threads : 1, run)) return false;
    const int n_phases = 10;
    const auto start = std::chrono::steady_clock::now();
    for (int phase = 1; phase <= n_phases; phase++) {
        const long target = tokens_per_session * phase / n_phases;
        auto work = [target](Soaker* s) {
            while (s->tokens < target && s->run_round()) {}
        };
        if (parallel) {
            std::vector<std::thread> threads;
            for (Soaker& s : run->soakers) threads.emplace_back(work, &s);
            for (std::thread& t : threads) t.join();
        } else {
            for (Soaker& s : run->soakers) work(&s);
        }
        run->rss.push_back(rss_bytes());
    }
    run->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    bool ok = true;
    for (Soaker& s : run->soakers) {
        if (s.failed) {
            std::fprintf(stderr, "gpt2-soak: session %d failed: %s\n", s.index, s.error.c_str());
            ok = false;
        }
        gpt2_session_free(s.session);
        s.session = nullptr;
    }
    return ok;
}

int main(int argc, char** argv) {
    if (argc < 2 || argv[1][0] == '-') {
        std::fprintf(stderr, "usage: gpt2-soak MODEL [--tokens N] [--sessions S] [--threads T] [--rss-bound-kib K]\n");
        return 2;
    }
    long n_tokens = 100000;
    int n_sessions = 4, n_threads = 2;
    long rss_bound_kib = 4096;
    for (int i = 2; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        const long v = std::strtol(argv[i + 1], nullptr, 10);
        if (flag == "--tokens") n_tokens = v;
        else if (flag == "--sessions") n_sessions = (int)v;
        else if (flag == "--threads") n_threads = (int)v;
        else if (flag == "--rss-bound-kib") rss_bound_kib = v;
        else {
            std::fprintf(stderr, "gpt2-soak: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (n_tokens <= 0 || n_sessions <= 0 || n_threads <= 0) {
        std::fprintf(stderr, "gpt2-soak: --tokens, --sessions and --threads must be positive\n");
        return 2;
    }
    const size_t rss_start = rss_bytes();
    gpt2_model* model = nullptr;
    gpt2_error err;
    if (gpt2_model_load_file(argv[1], nullptr, &model, &err) != GPT2_OK) {
        std::fprintf(stderr, "gpt2-soak: %s\n", err.message);
        return 1;
    }
    const long per_session = (n_tokens + n_sessions - 1) / n_sessions;
    Run parallel, serial;
    bool ok = soak(model, per_session, n_sessions, n_threads, true, &parallel);
    ok = soak(model, per_session, n_sessions, n_threads, false, &serial) && ok;
    gpt2_model_free(model);

    long total = 0, crossings = 0, rounds = 0;
    for (const Soaker& s : parallel.soakers) {
        total += s.tokens;
        crossings += s.crossings;
        rounds += s.round;
    }
    std::printf("gpt2-soak: %d sessions, %ld tokens, %ld rounds (resets), %ld tokens past the context\n", n_sessions, total, rounds, crossings);
    std::printf("  parallel (%d threads x %d workers): %.1f s, %.0f tokens/s\n", n_sessions, n_threads, parallel.seconds, (double)total / parallel.seconds);
    std::printf("  serial   (1 thread, 1 worker):     %.1f s, %.0f tokens/s\n", serial.seconds, (double)total / serial.seconds);
    std::printf("  RSS: start %zu KiB, after warm-up %zu KiB, end of parallel run %zu KiB, end %zu KiB\n", rss_start / 1024,
                parallel.rss.front() / 1024, parallel.rss.back() / 1024, serial.rss.back() / 1024);
    const size_t warm = parallel.rss.front();
    for (const Run* run : {&parallel, &serial}) {
        for (size_t i = 0; i < run->rss.size(); i++) {
            if (run->rss[i] > warm + (size_t)rss_bound_kib * 1024) {
                std::printf("FAIL: %s run, phase %zu: RSS %zu KiB, more than %ld KiB above the %zu KiB after warm-up\n",
                            run == &parallel ? "parallel" : "serial", i + 1, run->rss[i] / 1024, rss_bound_kib, warm / 1024);
                ok = false;
            }
        }
    }
    for (size_t i = 0; i < parallel.soakers.size(); i++) {
        const Soaker &a = parallel.soakers[i], &b = serial.soakers[i];
        if (a.hash != b.hash || a.tokens != b.tokens) {
            std::printf("FAIL: session %zu: parallel run %ld tokens hash %016llx, serial run %ld tokens hash %016llx\n", i, a.tokens,
                        (unsigned long long)a.hash, b.tokens, (unsigned long long)b.hash);
            ok = false;
        }
    }
    std::printf("%s\n", ok ? "OK: memory flat after warm-up, token streams identical to the serial run" : "FAILED");
    return ok ? 0 : 1;
}
