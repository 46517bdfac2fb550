// npc.cpp - a game loop at 60 Hz while five characters "think" together on one worker thread.
// Each answers in a form the game parses - "ACTION: <one of its actions>", then its line - held
// by a grammar of its own (gpt2_grammar_from_gbnf), so the game can act on every answer.
// One model is loaded and shared. The scene (what the player said) is evaluated once and forked
// into each character's session (gpt2_session_copy), so no character reads it again. The worker
// generates all characters' speeches in one batch (gpt2_generate_batch: one pass over the
// weights per token of every character, so five cost little more than one), each session with
// n_threads = 1, so the game keeps its other cores; text reaches the main thread through a locked
// queue. After the first speeches the game saves ROMEO (gpt2_session_save, as into a save game)
// and asks him once more; at the end it loads him into a new session (gpt2_session_load) and
// checks that he says the same. At the end it reports what a game developer watches: how long
// each line took to be ready (whole, on the main thread) from when it was asked for, and the
// frames that came more than 1 ms late for their 1/60 s tick.
//     npc [MODEL.gguf]        (default: the model the repo ships)
#define GPT2_IMPLEMENTATION
#include "gpt2.h"

#include "default_model.h"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

struct Queue { // waiting for the next frame
    std::mutex mutex;
    std::vector<std::pair<int, std::string>> items;
    Clock::time_point asked; // when the player asked Romeo again
};
struct Speech { int line; Queue* queue; std::vector<int32_t> tokens; gpt2_match form; }; // one line of the play

static int on_token(void* user, int32_t token, const char* text, size_t len) {
    Speech* speech = (Speech*)user;
    if (token >= 0) speech->tokens.push_back(token);
    std::lock_guard<std::mutex> lock(speech->queue->mutex);
    speech->queue->items.emplace_back(speech->line, std::string(text, len));
    return 0;
}

// A character's answer: its action, one of those it has, then one sentence and the blank line
// that ends a speech in this model's text (Shakespeare), so the next speaker's tag follows as
// in the text it learned from. The sentence is whole words, at most 16, so when it reaches its
// length it ends after a word, never inside one. Generation ends where the grammar's sentence does.
static std::string answer_grammar(const std::vector<std::string>& actions) {
    std::string choice;
    for (const std::string& a : actions) choice += (choice.empty() ? "\"" : " | \"") + a + "\"";
    return "root ::= \"ACTION: \" (" + choice + ") \"\\n\" [A-Z] [a-z'-]{0,13} ([,;:]? \" \" [A-Za-z'-]{1,14}){0,15} [.!?] \"\\n\\n\"";
}

// The game's side: the action of an answer, or "" when the answer is incomplete.
static std::string parsed_action(const std::string& answer) {
    const size_t end = answer.find('\n');
    return answer.rfind("ACTION: ", 0) == 0 && end != std::string::npos ? answer.substr(8, end - 8) : "";
}

static gpt2_generate_params speech_params(uint64_t seed, const gpt2_grammar* grammar, Speech* speech) {
    gpt2_generate_params gp = gpt2_generate_default_params();
    gp.max_new_tokens = 280; // the longest answer the grammar allows fits (8 + 8 + 1 + 14 + 15 x 16 + 3)
    gp.seed = seed;          // each character its own dice
    gp.grammar = grammar;
    gp.grammar_match = &speech->form;
    gp.on_token = on_token;
    gp.user = speech;
    return gp;
}

static bool ok(gpt2_result result, const gpt2_error& err) {
    if (result != GPT2_OK) std::fprintf(stderr, "%s\n", err.message);
    return result == GPT2_OK;
}

static double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Frame times as a game developer reads them: the median and the worst, the p99 only when there
// are enough frames for one (100), and the late frames - over the budget by more than 1 ms, past
// the sleep's own jitter (a few hundredths of a millisecond, made up by the next frame) - with
// how late each was.
static void print_frames(std::vector<double> ms, double budget_ms, double max_work_ms) {
    if (ms.empty()) return;
    std::vector<double> late;
    for (double v : ms) if (v > budget_ms + 1) late.push_back(v - budget_ms);
    std::sort(ms.begin(), ms.end());
    std::sort(late.begin(), late.end(), [](double a, double b) { return a > b; });
    std::printf("%zu frames at 60 Hz while the characters wrote: median %.2f ms, max %.2f ms", ms.size(), ms[ms.size() / 2], ms.back());
    if (ms.size() >= 100) std::printf(", p99 %.2f ms\n", ms[ms.size() * 99 / 100]);
    else std::printf(" (too few frames for a p99)\n");
    std::printf("  late frames (over the %.1f ms budget by more than 1 ms): %zu of %zu", budget_ms, late.size(), ms.size());
    for (size_t i = 0; i < late.size() && i < 5; i++) std::printf("%s%.2f", i ? ", " : ", by ", late[i]);
    std::printf("%s\n", late.empty() ? "" : late.size() > 5 ? ", ... ms" : " ms");
    // Taking the text is all the main thread does for the characters: when that is tiny and a
    // frame is still late, the OS woke the thread late (a loaded machine), not the text.
    std::printf("  the main thread's work for the text: at most %.3f ms a frame%s\n", max_work_ms,
                !late.empty() && max_work_ms < 1 ? " (so the late frames are the OS waking the thread late: a busy machine)" : "");
}

int main(int argc, char** argv) {
    const char* path = example_model_path(argc, argv);
    gpt2_model* model = nullptr;
    gpt2_error err;
    if (!path || gpt2_model_load_file(path, nullptr, &model, &err) != GPT2_OK)
        return std::fprintf(stderr, "%s\n", path ? err.message : "usage: npc MODEL.gguf"), 1;

    // The scene, evaluated once. Every session keeps it when its context fills (n_keep) and
    // drops half of the rest at once (the discard policy), so a long scene stays cheap.
    const char* scene = "PLAYER:\nGood morrow, friends! What news in Verona?\n\n";
    std::vector<int32_t> scene_tokens(256);
    size_t n_scene = 0;
    if (!ok(gpt2_tokenize(model, scene, std::strlen(scene), 0, scene_tokens.data(), scene_tokens.size(), &n_scene, &err), err)) return 1;
    gpt2_session_params sp = gpt2_session_default_params();
    sp.n_threads = 1; // the batch runs on sessions[0]'s threads: the worker thread alone
    sp.kv_f16 = 1;    // half the memory, and half the save game
    sp.context_policy = GPT2_CONTEXT_DISCARD;
    sp.n_keep = (int)n_scene;
    gpt2_session* shared = nullptr;
    if (!ok(gpt2_session_create(model, &sp, &shared, &err), err) || !ok(gpt2_session_eval(shared, scene_tokens.data(), n_scene, &err), err))
        return 1;

    const std::vector<std::string> cast = {"ROMEO", "JULIET", "MERCUTIO", "NURSE", "BENVOLIO"};
    const std::vector<std::vector<std::string>> actions = {
        {"sigh", "bow", "draw"}, {"wave", "blush", "flee"}, {"laugh", "draw", "mock"}, {"fuss", "hurry"}, {"bow", "warn"}};
    const size_t n = cast.size();
    std::vector<gpt2_grammar*> grammars(n, nullptr); // immutable: the worker thread reads them
    for (size_t i = 0; i < n; i++)
        if (!ok(gpt2_grammar_from_gbnf(model, answer_grammar(actions[i]).c_str(), nullptr, &grammars[i], &err), err)) return 1;
    std::vector<gpt2_session*> sessions(n, nullptr);
    for (gpt2_session*& session : sessions)
        if (!ok(gpt2_session_create(model, &sp, &session, &err), err) || !ok(gpt2_session_copy(session, shared, &err), err)) return 1;
    gpt2_session_free(shared);

    Queue queue;
    std::vector<Speech> lines; // a line per character, then Romeo's answer to the player
    for (size_t i = 0; i <= n; i++) lines.push_back({(int)i, &queue, {}, GPT2_MATCH_NONE});
    std::vector<std::string> said(lines.size());
    std::vector<unsigned char> save_game; // Romeo after his first speech
    const char* ask = "PLAYER:\nAnd what of Juliet?\n\nROMEO:\n"; // what the player says to him next
    std::string ask_prompt;
    std::atomic<bool> running{true};
    const auto t_scene = Clock::now(); // the player spoke: every character's line is asked for
    double batch_s = 0; // the first speeches, all characters together
    std::thread worker([&] {
        gpt2_error e;
        std::vector<std::string> tags;
        std::vector<const char*> prompts;
        std::vector<gpt2_generate_params> params;
        for (size_t i = 0; i < n; i++) tags.push_back(cast[i] + ":\n");
        for (size_t i = 0; i < n; i++) prompts.push_back(tags[i].c_str()), params.push_back(speech_params(1000 + i, grammars[i], &lines[i]));
        const auto t0 = Clock::now();
        const bool spoke = ok(gpt2_generate_batch(sessions.data(), prompts.data(), params.data(), n, &e), e);
        batch_s = ms_since(t0) / 1e3;
        // The game saves Romeo (to memory here; a game writes the bytes to its save file).
        size_t bytes = 0;
        gpt2_session_save(sessions[0], nullptr, 0, &bytes, &e);
        save_game.resize(bytes);
        if (spoke && ok(gpt2_session_save(sessions[0], save_game.data(), bytes, &bytes, &e), e)) {
            // The context ends with the grammar's blank line unless the speech ran to max_new_tokens.
            ask_prompt = std::string(lines[0].form == GPT2_MATCH_COMPLETE ? "" : "\n\n") + ask;
            gpt2_generate_params gp = speech_params(2000, grammars[0], &lines[n]);
            {
                std::lock_guard<std::mutex> lock(queue.mutex);
                queue.asked = Clock::now();
            }
            ok(gpt2_generate_text(sessions[0], ask_prompt.c_str(), &gp, &e), e);
        } else {
            save_game.clear();
        }
        running = false;
    });

    // The game loop: take what arrived, "update and draw", sleep to the next 1/60 s tick. A line
    // is ready when it is whole (the grammar's blank line ends it): the frame the game can show
    // it. The time between frames shows whether the game kept its 60 Hz.
    const auto tick = std::chrono::microseconds(16667);
    std::vector<double> ready_ms(lines.size(), -1); // from the request to the frame the line was whole
    auto drain = [&] {
        std::lock_guard<std::mutex> lock(queue.mutex);
        for (auto& item : queue.items) {
            const size_t line = (size_t)item.first;
            said[line] += item.second;
            const std::string& text = said[line];
            if (ready_ms[line] < 0 && text.size() >= 2 && text.compare(text.size() - 2, 2, "\n\n") == 0)
                ready_ms[line] = ms_since(line < n ? t_scene : queue.asked);
        }
        queue.items.clear();
    };
    std::vector<double> frame_ms;
    double max_work_ms = 0;
    auto next = Clock::now(), last = next;
    while (running) {
        const auto start = Clock::now();
        drain();
        max_work_ms = std::max(max_work_ms, ms_since(start));
        next += tick;
        std::this_thread::sleep_until(next);
        frame_ms.push_back(ms_since(last));
        last = Clock::now();
    }
    worker.join();
    drain();
    std::printf("%s", scene);
    for (size_t i = 0; i < n; i++)
        std::printf("%s:\n%s[the game: %s %s]\n\n", cast[i].c_str(), said[i].c_str(), cast[i].c_str(),
                    parsed_action(said[i]).empty() ? "ran out of tokens" : parsed_action(said[i]).c_str());
    std::printf("%s%s[the game: ROMEO %s]\n\n", ask, said[n].c_str(), parsed_action(said[n]).c_str());

    // Load the save game into a new session (with the same params: the context policy is not
    // saved): Romeo must say exactly what he said after the save.
    int status = 1;
    gpt2_session* restored = nullptr;
    Queue unused;
    Speech again{0, &unused, {}, GPT2_MATCH_NONE};
    gpt2_generate_params gp = speech_params(2000, grammars[0], &again);
    if (!save_game.empty() && ok(gpt2_session_create(model, &sp, &restored, &err), err) &&
        ok(gpt2_session_load(restored, save_game.data(), save_game.size(), &err), err) &&
        ok(gpt2_generate_text(restored, ask_prompt.c_str(), &gp, &err), err)) {
        status = again.tokens == lines[n].tokens ? 0 : 1;
        std::printf("Saved ROMEO after his first speech (%zu bytes) and loaded him into a new session: %s (%zu tokens).\n",
                    save_game.size(), status == 0 ? "he says the same" : "HE SAYS SOMETHING ELSE", again.tokens.size());
    }
    gpt2_session_free(restored);

    size_t tokens = 0;
    for (size_t i = 0; i < n; i++) tokens += lines[i].tokens.size();
    std::printf("%zu characters in one batch on one worker thread: %zu tokens in %.2f s, %.0f tokens/s together\n", n, tokens, batch_s,
                batch_s > 0 ? tokens / batch_s : 0.0);
    std::printf("Lines ready (whole, on the main thread), from when each was asked for:\n ");
    for (size_t i = 0; i <= n; i++) {
        const std::string who = i < n ? cast[i] : "ROMEO again";
        if (ready_ms[i] < 0) std::printf("%s %s never (ran out of tokens)", i ? "," : "", who.c_str());
        else std::printf("%s %s %.0f ms", i ? "," : "", who.c_str(), ready_ms[i]);
    }
    std::printf("\n");
    print_frames(frame_ms, 1000.0 / 60, max_work_ms);
    for (gpt2_session* session : sessions) gpt2_session_free(session);
    for (gpt2_grammar* grammar : grammars) gpt2_grammar_free(grammar);
    gpt2_model_free(model); // after every session and grammar is freed
    return status;
}
