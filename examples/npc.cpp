// npc.cpp - a game loop at 60 Hz while three characters "think" on worker threads.
// One model is loaded and shared. The scene (what the player said) is evaluated once and forked
// into each character's session (gpt2_session_copy), so no character reads it again. Each session
// has n_threads = 1, so the game keeps its other cores; text reaches the main thread through a
// locked queue. Mid-scene the game saves ROMEO (gpt2_session_save, as into a save game); at the
// end it loads him into a new session (gpt2_session_load) and checks that he says the same.
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

struct Queue { std::mutex mutex; std::vector<std::pair<int, std::string>> items; }; // waiting for the next frame
struct Speech { int line; Queue* queue; std::vector<int32_t> tokens; };              // one line of the play

static int on_token(void* user, int32_t token, const char* text, size_t len) {
    Speech* speech = (Speech*)user;
    if (token >= 0) speech->tokens.push_back(token);
    std::lock_guard<std::mutex> lock(speech->queue->mutex);
    speech->queue->items.emplace_back(speech->line, std::string(text, len));
    return 0;
}

// A speech ends where the next speaker's tag begins. In this model's text (Shakespeare) every
// tag, "NAME:", comes after a blank line, and the model invents names (CAMILLO, SICINIUS), so
// the blank line is where to stop. The stop string is not delivered (it stays in the context).
static const char* const next_speaker[] = {"\n\n"};

static gpt2_generate_params speech_params(uint64_t seed, Speech* speech) {
    gpt2_generate_params gp = gpt2_generate_default_params();
    gp.max_new_tokens = 100;
    gp.seed = seed; // each character its own dice
    gp.stop = next_speaker;
    gp.n_stop = 1;
    gp.on_token = on_token;
    gp.user = speech;
    return gp;
}

static bool ok(gpt2_result result, const gpt2_error& err) {
    if (result != GPT2_OK) std::fprintf(stderr, "%s\n", err.message);
    return result == GPT2_OK;
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
    sp.n_threads = 1; // one core per character
    sp.kv_f16 = 1;    // half the memory, and half the save game
    sp.context_policy = GPT2_CONTEXT_DISCARD;
    sp.n_keep = (int)n_scene;
    gpt2_session* shared = nullptr;
    if (!ok(gpt2_session_create(model, &sp, &shared, &err), err) || !ok(gpt2_session_eval(shared, scene_tokens.data(), n_scene, &err), err))
        return 1;

    const std::vector<std::string> cast = {"ROMEO", "JULIET", "MERCUTIO"};
    std::vector<gpt2_session*> sessions(cast.size(), nullptr);
    for (gpt2_session*& session : sessions)
        if (!ok(gpt2_session_create(model, &sp, &session, &err), err) || !ok(gpt2_session_copy(session, shared, &err), err)) return 1;
    gpt2_session_free(shared);

    Queue queue;
    std::vector<Speech> lines = {{0, &queue, {}}, {1, &queue, {}}, {2, &queue, {}}, {3, &queue, {}}}; // line 3: Romeo again
    std::vector<std::string> said(lines.size());
    std::vector<unsigned char> save_game; // Romeo after his first speech
    const char* ask = "PLAYER:\nAnd what of Juliet?\n\nROMEO:\n"; // what the player says to him next
    std::string ask_prompt;
    std::atomic<int> running{(int)cast.size()};
    std::vector<std::thread> workers;
    for (size_t i = 0; i < cast.size(); i++) workers.emplace_back([&, i] {
        gpt2_error e;
        gpt2_generate_params gp = speech_params(1000 + i, &lines[i]);
        if (ok(gpt2_generate_text(sessions[i], (cast[i] + ":\n").c_str(), &gp, &e), e) && i == 0) {
            // Mid-scene the game saves Romeo (to memory here; a game writes the bytes to its save file).
            size_t n = 0;
            gpt2_session_save(sessions[0], nullptr, 0, &n, &e);
            save_game.resize(n);
            if (ok(gpt2_session_save(sessions[0], save_game.data(), n, &n, &e), e)) {
                // The context ends with the stop string unless the speech ran to max_new_tokens.
                const bool stopped = lines[0].tokens.size() < (size_t)gp.max_new_tokens;
                ask_prompt = std::string(stopped ? "" : "\n\n") + ask;
                gp = speech_params(2000, &lines[3]);
                ok(gpt2_generate_text(sessions[0], ask_prompt.c_str(), &gp, &e), e);
            } else {
                save_game.clear();
            }
        }
        running--;
    });

    // The game loop: take what arrived, "update and draw", sleep to the next 1/60 s tick.
    const auto tick = std::chrono::microseconds(16667);
    auto drain = [&] {
        std::lock_guard<std::mutex> lock(queue.mutex);
        for (auto& item : queue.items) said[item.first] += item.second;
        queue.items.clear();
    };
    std::vector<double> frame_ms;
    auto next = Clock::now(), last = next;
    while (running > 0) {
        drain();
        next += tick;
        std::this_thread::sleep_until(next);
        auto now = Clock::now();
        frame_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
        last = now;
    }
    for (std::thread& t : workers) t.join();
    drain();
    std::printf("%s", scene);
    for (size_t i = 0; i < cast.size(); i++) std::printf("%s:\n%s\n\n", cast[i].c_str(), said[i].c_str());
    std::printf("%s%s\n\n", ask, said[3].c_str());

    // Load the save game into a new session (with the same params: the context policy is not
    // saved): Romeo must say exactly what he said after the save.
    int status = 1;
    gpt2_session* restored = nullptr;
    Queue unused;
    Speech again{0, &unused, {}};
    gpt2_generate_params gp = speech_params(2000, &again);
    if (!save_game.empty() && ok(gpt2_session_create(model, &sp, &restored, &err), err) &&
        ok(gpt2_session_load(restored, save_game.data(), save_game.size(), &err), err) &&
        ok(gpt2_generate_text(restored, ask_prompt.c_str(), &gp, &err), err)) {
        status = again.tokens == lines[3].tokens ? 0 : 1;
        std::printf("Saved ROMEO after his first speech (%zu bytes) and loaded him into a new session: %s (%zu tokens).\n",
                    save_game.size(), status == 0 ? "he says the same" : "HE SAYS SOMETHING ELSE", again.tokens.size());
    }
    gpt2_session_free(restored);

    if (frame_ms.empty()) frame_ms.push_back(0);
    std::sort(frame_ms.begin(), frame_ms.end());
    double sum = 0;
    for (double ms : frame_ms) sum += ms;
    std::printf("%zu frames at 60 Hz while generating: frame time mean %.2f ms, median %.2f, p99 %.2f, max %.2f\n",
                frame_ms.size(), sum / frame_ms.size(), frame_ms[frame_ms.size() / 2],
                frame_ms[frame_ms.size() * 99 / 100], frame_ms.back());
    for (gpt2_session* session : sessions) gpt2_session_free(session);
    gpt2_model_free(model); // after every session is freed
    return status;
}
