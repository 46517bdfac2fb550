// npc.cpp - a game loop at 60 Hz while three characters "think" on worker threads.
// One model is loaded and shared; each character has its own session with n_threads = 1, so
// the game keeps its other cores. Text reaches the main thread through a locked queue.
//     npc [MODEL.gguf]        (default: the model the repo ships)
#define GPT2_IMPLEMENTATION
#include "gpt2.h"

#include "default_model.h"
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

struct Queue { std::mutex mutex; std::vector<std::pair<int, std::string>> items; }; // waiting for the next frame
struct Npc { int id; const char* line; Queue* queue; };                               // line: the prompt

static int on_token(void* user, int32_t, const char* text, size_t len) {
    Npc* npc = (Npc*)user;
    std::lock_guard<std::mutex> lock(npc->queue->mutex);
    npc->queue->items.emplace_back(npc->id, std::string(text, len));
    return 0;
}

int main(int argc, char** argv) {
    const char* path = example_model_path(argc, argv);
    gpt2_model* model = nullptr;
    gpt2_error err;
    if (!path || gpt2_model_load_file(path, nullptr, &model, &err) != GPT2_OK)
        return std::fprintf(stderr, "%s\n", path ? err.message : "usage: npc MODEL.gguf"), 1;

    Queue queue;
    std::vector<Npc> npcs = {{0, "ROMEO:", &queue}, {1, "JULIET:", &queue}, {2, "MERCUTIO:", &queue}};
    std::vector<std::string> said(npcs.size());
    std::atomic<int> running{(int)npcs.size()};
    std::vector<std::thread> workers;
    for (Npc& npc : npcs) workers.emplace_back([&, n = &npc] {
        gpt2_session_params sp = gpt2_session_default_params();
        sp.n_threads = 1; // one core per character
        gpt2_session* session = nullptr;
        gpt2_error e;
        if (gpt2_session_create(model, &sp, &session, &e) == GPT2_OK) {
            gpt2_generate_params gp = gpt2_generate_default_params();
            gp.max_new_tokens = 100; // stays within the context: no sliding-window recomputation
            gp.seed = 1000 + n->id; // each character its own dice
            gp.on_token = on_token;
            gp.user = n;
            if (gpt2_generate_text(session, n->line, &gp, &e) != GPT2_OK) std::fprintf(stderr, "%s\n", e.message);
            gpt2_session_free(session);
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
    for (Npc& npc : npcs) std::printf("--- %s%s\n\n", npc.line, said[npc.id].c_str());

    if (frame_ms.empty()) frame_ms.push_back(0);
    std::sort(frame_ms.begin(), frame_ms.end());
    double sum = 0;
    for (double ms : frame_ms) sum += ms;
    std::printf("%zu frames at 60 Hz while generating: frame time mean %.2f ms, median %.2f, p99 %.2f, max %.2f\n",
                frame_ms.size(), sum / frame_ms.size(), frame_ms[frame_ms.size() / 2],
                frame_ms[frame_ms.size() * 99 / 100], frame_ms.back());
    gpt2_model_free(model); // after every session is freed
    return 0;
}
