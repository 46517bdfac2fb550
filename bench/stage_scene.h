// gpt2-bench --stage N: a game's scene on a gpt2_stage, timed as a player meets it. N characters
// are forked (gpt2_session_copy) from one session that read the scene (--scene-tokens tokens);
// the player speaks to them at random times (Poisson arrivals, --arrival-ms apart on average,
// seeded), each time a line of about 20 tokens, and the character answers --answer-tokens
// tokens. Every line joins the stage when it is asked and the stage is stepped until all have
// answered. With --stage-budget US the stage is stepped under that frame budget (on the calling
// thread) and each call's overrun past the budget is recorded; the same scene is also run with
// whole steps first, for the tokens/s beside it. Part of gpt2_bench.cpp (its helpers, and
// percentile from grammar_stats.h).
//
// gpt2-bench --forks N: the memory of forks. N sessions forked from one that read the scene, then
// each --own-tokens tokens of its own, a token a pass for all of them together (gpt2_batch_eval,
// as a stage would generate them); the resident memory this adds, beside the KV cache of the N x
// own tokens alone (what the forks would hold if the scene cost nothing).
#pragma once

struct StageLine {
    double asked_s = -1, first_token_s = -1;
    int tokens = 0;
};

static int stage_heard(void* user, int32_t token, const char*, size_t) {
    StageLine* line = (StageLine*)user;
    if (token < 0) return 0;
    if (line->tokens++ == 0) line->first_token_s = now_s();
    return 0;
}

static double resident_bytes() {
#if defined(__linux__)
    long pages = 0, resident = 0;
    FILE* f = std::fopen("/proc/self/statm", "r");
    if (!f) return 0;
    const bool ok = std::fscanf(f, "%ld %ld", &pages, &resident) == 2;
    std::fclose(f);
    return ok ? (double)resident * 4096.0 : 0.0;
#else
    return 0.0;
#endif
}

struct StageResult {
    double tok_s = 0, ttft_p50_ms = 0, ttft_p99_ms = 0, kv_bytes = 0, rss_growth_bytes = 0, overrun_p99_us = 0, overrun_max_us = 0;
    int steps = 0, calls = 0, tokens = 0;
};

struct StageScene {
    int characters = 0, scene_tokens = 400, answer_tokens = 40, threads = 2, kv_f16 = 1;
    double arrival_ms = 100;
    uint64_t seed = 1;
    const gpt2__kernels* kernels = nullptr;
};

// splitmix64: the same arrivals on every platform for a seed (std's distributions are not)
static double uniform01(uint64_t* state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

// A session of `sp` that has read the scene's --scene-tokens tokens; NULL on an error.
static gpt2_session* read_scene(gpt2_model* model, const StageScene& sc, const gpt2_session_params& sp, gpt2_error* err) {
    const int n_vocab = gpt2_model_get_info(model).n_vocab;
    std::vector<int32_t> scene((size_t)sc.scene_tokens);
    for (size_t i = 0; i < scene.size(); i++) scene[i] = (int32_t)((i * 7919 + 13) % (size_t)n_vocab);
    gpt2_session* s = nullptr;
    if (gpt2_session_create(model, &sp, &s, err) == GPT2_OK && gpt2_session_eval(s, scene.data(), scene.size(), err) == GPT2_OK) return s;
    gpt2_session_free(s);
    return nullptr;
}

static bool run_stage_scene(gpt2_model* model, const StageScene& sc, int64_t budget_us, StageResult* out, gpt2_error* err) {
    const gpt2_model_info info = gpt2_model_get_info(model);
    const char* player = "PLAYER: Good evening, merchant. What do you have for a traveller who walked all day?\n";
    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = 1; // a character's own calls are none here: the stage runs the passes
    sp.kv_f16 = sc.kv_f16;
    sp.n_ctx = std::min(info.n_ctx, sc.scene_tokens + 64 + sc.answer_tokens);
    gpt2_session* shared = read_scene(model, sc, sp, err);
    if (!shared) return false;
    const double rss_before = resident_bytes();
    std::vector<gpt2_session*> characters((size_t)sc.characters, nullptr);
    for (gpt2_session*& c : characters) {
        if (gpt2_session_create(model, &sp, &c, err) != GPT2_OK || gpt2_session_copy(c, shared, err) != GPT2_OK) return false;
        if (sc.kernels) gpt2__cpu(c)->kernels = sc.kernels;
    }
    gpt2_session_free(shared);
    gpt2_stage_params stp = gpt2_stage_default_params();
    stp.n_threads = sc.threads;
    gpt2_stage* stage = nullptr;
    if (gpt2_stage_create(model, &stp, &stage, err) != GPT2_OK) return false;
    if (sc.kernels) gpt2__cpu(stage->runner)->kernels = sc.kernels;

    std::vector<StageLine> lines((size_t)sc.characters);
    std::vector<gpt2_generate_params> params((size_t)sc.characters, gpt2_generate_default_params());
    std::vector<double> arrival((size_t)sc.characters);
    uint64_t rng = sc.seed;
    double at = 0;
    for (size_t i = 0; i < lines.size(); i++) {
        at += -std::log(1.0 - uniform01(&rng)) * sc.arrival_ms / 1e3;
        arrival[i] = sc.arrival_ms > 0 ? at : 0;
        params[i].max_new_tokens = sc.answer_tokens;
        params[i].temperature = 0.8f;
        params[i].top_k = 40;
        params[i].seed = sc.seed + i;
        params[i].on_token = stage_heard;
        params[i].user = &lines[i];
    }
    std::vector<double> overrun_us;
    size_t asked = 0, n_active = 0;
    const double t0 = now_s();
    bool ok = true;
    while (ok && (asked < lines.size() || n_active > 0)) {
        const double t = now_s() - t0;
        bool added = false;
        for (; asked < lines.size() && arrival[asked] <= t; asked++, added = true) {
            lines[asked].asked_s = now_s();
            ok = ok && gpt2_stage_add(stage, characters[asked], player, &params[asked], err) == GPT2_OK;
        }
        if (n_active == 0 && !added && asked < lines.size()) { /* an idle stage until the next line */
            std::this_thread::sleep_for(std::chrono::duration<double>(arrival[asked] - t));
            continue;
        }
        const double start = now_s();
        ok = ok && gpt2_stage_step(stage, budget_us, &n_active, err) == GPT2_OK;
        const double took_us = (now_s() - start) * 1e6;
        if (budget_us > 0) overrun_us.push_back(std::max(0.0, took_us - (double)budget_us));
        out->calls++;
        out->steps += !stage->in_flight;
    }
    const double end = now_s();
    std::vector<double> ttft_ms;
    for (const StageLine& l : lines) {
        out->tokens += l.tokens;
        if (l.first_token_s >= 0) ttft_ms.push_back((l.first_token_s - l.asked_s) * 1e3);
    }
    const double first = arrival.empty() ? 0 : arrival.front();
    out->tok_s = out->tokens / std::max(1e-9, end - t0 - first);
    out->ttft_p50_ms = percentile(ttft_ms, 0.5);
    out->ttft_p99_ms = percentile(ttft_ms, 0.99);
    out->kv_bytes = (double)gpt2__kv_bytes(model); /* every block alive once, shared or not */
    out->rss_growth_bytes = resident_bytes() - rss_before;
    out->overrun_p99_us = percentile(overrun_us, 0.99);
    out->overrun_max_us = percentile(overrun_us, 1.0);
    gpt2_stage_free(stage);
    for (gpt2_session* c : characters) gpt2_session_free(c);
    return ok;
}

static void print_stage(const char* prefix, const StageResult& r, bool json) {
    if (json)
        std::printf("\"%stok_s\": %.1f, \"%sttft_ms_p50\": %.2f, \"%sttft_ms_p99\": %.2f, \"%skv_bytes\": %.0f, \"%srss_bytes\": %.0f, "
                    "\"%ssteps\": %d, \"%scalls\": %d, \"%stokens\": %d, \"frame_overrun_us_p99\": %.1f, \"frame_overrun_us_max\": %.1f",
                    prefix, r.tok_s, prefix, r.ttft_p50_ms, prefix, r.ttft_p99_ms, prefix, r.kv_bytes, prefix, r.rss_growth_bytes, prefix, r.steps,
                    prefix, r.calls, prefix, r.tokens, r.overrun_p99_us, r.overrun_max_us);
    else
        std::printf("%s%d tokens in %d steps (%d calls): %.1f tok/s, time to first token p50 %.1f ms p99 %.1f ms, KV cache %.1f MB, "
                    "resident memory +%.1f MB; frame overrun p99 %.0f us, max %.0f us\n",
                    prefix, r.tokens, r.steps, r.calls, r.tok_s, r.ttft_p50_ms, r.ttft_p99_ms, r.kv_bytes / 1e6, r.rss_growth_bytes / 1e6, r.overrun_p99_us,
                    r.overrun_max_us);
}

struct ForkResult {
    double rss_growth_bytes = 0, kv_bytes = 0, own_cache_bytes = 0;
};

static bool run_fork_scene(gpt2_model* model, const StageScene& sc, int own_tokens, ForkResult* out, gpt2_error* err) {
    const gpt2_model_info info = gpt2_model_get_info(model);
    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = 1;
    sp.kv_f16 = sc.kv_f16;
    sp.n_ctx = std::min(info.n_ctx, sc.scene_tokens + own_tokens);
    gpt2_session* shared = read_scene(model, sc, sp, err);
    if (!shared) return false;
    const double rss_before = resident_bytes();
    std::vector<gpt2_session*> forks((size_t)sc.characters, nullptr);
    bool ok = true;
    for (size_t f = 0; f < forks.size() && ok; f++) {
        gpt2_session_params fp = sp;
        if (f == 0) fp.n_threads = sc.threads; /* the batch's passes run on its threads */
        ok = gpt2_session_create(model, &fp, &forks[f], err) == GPT2_OK && gpt2_session_copy(forks[f], shared, err) == GPT2_OK;
        if (ok && sc.kernels) gpt2__cpu(forks[f])->kernels = sc.kernels;
    }
    gpt2_session_free(shared);
    std::vector<int32_t> next(forks.size());
    std::vector<const int32_t*> ids(forks.size());
    std::vector<size_t> counts(forks.size(), 1);
    for (int t = 0; t < own_tokens && ok; t++) {
        for (size_t f = 0; f < forks.size(); f++) {
            next[f] = (int32_t)(((size_t)t * 7919 + f * 104729 + 5) % (size_t)info.n_vocab);
            ids[f] = &next[f];
        }
        ok = gpt2_batch_eval(forks.data(), ids.data(), counts.data(), forks.size(), err) == GPT2_OK;
    }
    out->rss_growth_bytes = resident_bytes() - rss_before;
    out->kv_bytes = (double)gpt2__kv_bytes(model);
    out->own_cache_bytes = (double)sc.characters * own_tokens * 2.0 * info.n_layer * info.n_embd * (sc.kv_f16 ? 2 : 4);
    for (gpt2_session* f : forks) gpt2_session_free(f);
    return ok;
}
