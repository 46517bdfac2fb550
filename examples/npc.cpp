// npc.cpp - a game loop at 60 Hz while five characters "think" together on one worker thread.
// Each answers in a form the game parses - "ACTION: <one of its actions>", then its line. The
// game picks the action: the one of the character's actions the model finds the most likely
// after "ACTION:" (gpt2_choose, which scores options without generating); the line follows,
// held by a grammar (gpt2_grammar_from_gbnf) to one sentence of whole words. At the end each
// character's state - its mood and how far it trusts the player - comes back as a JSON object
// held by a JSON Schema (gpt2_grammar_from_json_schema), which the game reads into its own
// struct; a model whose vocabulary cannot write JSON (the shipped one learned plays: no braces
// or quotes) says so, and the rest runs as before. One model is loaded and shared. The scene (what the player said) is evaluated once and forked
// into each character's session (gpt2_session_copy), so no character reads it again. The
// characters are asked one after another, a few tokens apart, as a game asks them: each line
// joins a stage (gpt2_stage_add) that the worker steps (gpt2_stage_step: one pass over the
// weights per token of every character speaking, so five cost little more than one, and a line
// asked later joins the next pass instead of waiting for the others), on one thread
// (n_threads = 1), so the game keeps its other cores; text reaches the main thread through a
// locked queue. After the first speeches the game saves ROMEO (gpt2_session_save, as into a save game)
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
    std::vector<Clock::time_point> asked; // when each line was asked for
};
struct Speech { // one line of the play: what the worker thread wrote, and the queue it went through
    int line;
    Queue* queue;
    std::vector<int32_t> tokens;
    gpt2_match form;
    std::string text;
};

static int on_token(void* user, int32_t token, const char* text, size_t len) {
    Speech* speech = (Speech*)user;
    if (token >= 0) speech->tokens.push_back(token);
    speech->text.append(text, len);
    std::lock_guard<std::mutex> lock(speech->queue->mutex);
    speech->queue->items.emplace_back(speech->line, std::string(text, len));
    return 0;
}

// A character's line, after its action: one sentence and the blank line that ends a speech in
// this model's text (Shakespeare), so the next speaker's tag follows as in the text it learned
// from. The sentence is whole words, at most 16, so when it reaches its length it ends after a
// word, never inside one. Generation ends where the grammar's sentence does.
static const char* line_grammar = "root ::= [A-Z] [a-z'-]{0,13} ([,;:]? \" \" [A-Za-z'-]{1,14}){0,15} [.!?] \"\\n\\n\"";

// A character's state as the game keeps it, and the schema the model fills it from. Compact JSON
// with the properties in the schema's order, so the game reads it with one sscanf.
struct State { char mood[16]; int trust; };
static const char* state_schema = R"({
  "type": "object",
  "properties": {
    "mood": {"enum": ["calm", "merry", "angry", "afraid"]},
    "trust": {"type": "integer", "minimum": 0, "maximum": 10}
  },
  "required": ["mood", "trust"],
  "additionalProperties": false
})";

static bool parsed_state(const std::string& json, State* state) {
    return std::sscanf(json.c_str(), "{\"mood\":\"%15[a-z]\",\"trust\":%d}", state->mood, &state->trust) == 2;
}

static bool ok(gpt2_result result, const gpt2_error& err) {
    if (result != GPT2_OK) std::fprintf(stderr, "%s\n", err.message);
    return result == GPT2_OK;
}

// The game picks the character's action: it says `prompt` and "ACTION:", and the most likely of
// its actions follows (gpt2_choose scores them all, their shared beginnings once, and leaves the
// session as it was). The action reaches the game as the start of the line; *then is what the
// character says next, the action and the line break, to generate the line after.
static bool pick_action(const gpt2_model* model, gpt2_session* session, const std::string& prompt, const std::vector<std::string>& actions, Speech* speech,
                        std::string* then, gpt2_error* err) {
    const std::string asked = prompt + "ACTION:";
    std::vector<int32_t> tokens(asked.size() * 4 + 16);
    size_t n_tokens = 0;
    std::vector<std::string> options;
    std::vector<const char*> pointers;
    for (const std::string& a : actions) options.push_back(" " + a); // as the text goes on: "ACTION: bow"
    for (const std::string& o : options) pointers.push_back(o.c_str());
    size_t best = 0;
    if (!ok(gpt2_tokenize(model, asked.data(), asked.size(), 0, tokens.data(), tokens.size(), &n_tokens, err), *err) ||
        !ok(gpt2_session_eval(session, tokens.data(), n_tokens, err), *err) ||
        !ok(gpt2_choose(session, pointers.data(), pointers.size(), nullptr, &best, err), *err))
        return false;
    *then = options[best] + "\n";
    const std::string shown = "ACTION:" + *then;
    on_token(speech, -1, shown.data(), shown.size());
    return true;
}

// The game's side: the action of an answer, or "" when the answer is incomplete.
static std::string parsed_action(const std::string& answer) {
    const size_t end = answer.find('\n');
    return answer.rfind("ACTION: ", 0) == 0 && end != std::string::npos ? answer.substr(8, end - 8) : "";
}

static gpt2_generate_params speech_params(uint64_t seed, const gpt2_grammar* grammar, Speech* speech) {
    gpt2_generate_params gp = gpt2_generate_default_params();
    gp.max_new_tokens = 260; // the longest line the grammar allows fits (1 + 13 + 15 x 16 + 1 + 2 characters)
    gp.seed = seed;          // each character its own dice
    gp.grammar = grammar;
    gp.grammar_match = &speech->form;
    gp.on_token = on_token;
    gp.user = speech;
    return gp;
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
    sp.n_threads = 1; // gpt2_choose and the states' batch run on the session's threads: the worker thread alone
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
    gpt2_grammar* line = nullptr; // immutable: the worker thread reads it for every character
    if (!ok(gpt2_grammar_from_gbnf(model, line_grammar, nullptr, &line, &err), err)) return 1;
    gpt2_json_schema_params jp = gpt2_json_schema_default_params();
    jp.compact = 1;
    gpt2_grammar* state = nullptr; // stays NULL where the vocabulary cannot write JSON: no states then
    std::string no_state;
    if (gpt2_grammar_from_json_schema(model, state_schema, std::strlen(state_schema), &jp, &state, &err) != GPT2_OK) no_state = err.message;
    std::vector<gpt2_session*> sessions(n, nullptr);
    for (gpt2_session*& session : sessions)
        if (!ok(gpt2_session_create(model, &sp, &session, &err), err) || !ok(gpt2_session_copy(session, shared, &err), err)) return 1;
    gpt2_session_free(shared);

    Queue queue;
    queue.asked.resize(n + 1);
    std::vector<Speech> lines; // a line per character, then Romeo's answer to the player
    for (size_t i = 0; i <= n; i++) lines.push_back({(int)i, &queue, {}, GPT2_MATCH_NONE, {}});
    Queue unshown; // the states are read when the scene is over, not shown as they come
    std::vector<Speech> states;
    for (size_t i = 0; i < n; i++) states.push_back({(int)i, &unshown, {}, GPT2_MATCH_NONE, {}});
    std::vector<std::string> said(lines.size());
    std::vector<unsigned char> save_game; // Romeo after his first speech
    const char* ask = "PLAYER:\nAnd what of Juliet?\n\nROMEO:\n"; // what the player says to him next
    std::string ask_prompt;
    std::atomic<bool> running{true};
    double choose_ms = 0, batch_s = 0; // the first actions and speeches, all characters
    std::thread worker([&] {
        gpt2_error e;
        std::vector<std::string> then(n); // each character's action and line break, its speech's prompt
        std::vector<const char*> prompts;
        std::vector<gpt2_generate_params> params;
        for (size_t i = 0; i < n; i++) params.push_back(speech_params(1000 + i, line, &lines[i]));
        // The stage runs its passes on its own thread pool: one thread, the worker's share.
        gpt2_stage_params stp = gpt2_stage_default_params();
        stp.n_threads = 1;
        gpt2_stage* stage = nullptr;
        bool spoke = ok(gpt2_stage_create(model, &stp, &stage, &e), e);
        const auto t0 = Clock::now();
        size_t n_asked = 0, n_active = 0;
        for (int step = 0; spoke && (n_asked < n || n_active > 0); step++) {
            if (n_asked < n && step % 6 == 0) { // the next character is asked: it joins the next pass
                const size_t i = n_asked++;
                {
                    std::lock_guard<std::mutex> lock(queue.mutex);
                    queue.asked[i] = Clock::now();
                }
                const auto t_choose = Clock::now();
                spoke = pick_action(model, sessions[i], cast[i] + ":\n", actions[i], &lines[i], &then[i], &e) &&
                        ok(gpt2_stage_add(stage, sessions[i], then[i].c_str(), &params[i], &e), e);
                choose_ms += ms_since(t_choose);
            }
            spoke = spoke && ok(gpt2_stage_step(stage, 0, &n_active, &e), e);
        }
        batch_s = (ms_since(t0) - choose_ms) / 1e3;
        gpt2_stage_free(stage);
        // The game saves Romeo (to memory here; a game writes the bytes to its save file).
        size_t bytes = 0;
        gpt2_session_save(sessions[0], nullptr, 0, &bytes, &e);
        save_game.resize(bytes);
        if (spoke && ok(gpt2_session_save(sessions[0], save_game.data(), bytes, &bytes, &e), e)) {
            // The context ends with the grammar's blank line unless the speech ran to max_new_tokens.
            ask_prompt = std::string(lines[0].form == GPT2_MATCH_COMPLETE ? "" : "\n\n") + ask;
            gpt2_generate_params gp = speech_params(2000, line, &lines[n]);
            {
                std::lock_guard<std::mutex> lock(queue.mutex);
                queue.asked[n] = Clock::now();
            }
            std::string again;
            if (pick_action(model, sessions[0], ask_prompt, actions[0], &lines[n], &again, &e)) ok(gpt2_generate_text(sessions[0], again.c_str(), &gp, &e), e);
        } else {
            save_game.clear();
        }
        // Each character's state after the scene, in one batch: a JSON object the schema holds.
        if (spoke && state) {
            std::vector<std::string> asked(n);
            params.clear();
            for (size_t i = 0; i < n; i++) {
                const Speech& last = lines[i == 0 ? n : i]; // Romeo spoke last to the player
                asked[i] = std::string(last.form == GPT2_MATCH_COMPLETE ? "" : "\n\n") + "STATE: ";
                prompts.push_back(asked[i].c_str());
                gpt2_generate_params gp = speech_params(3000 + i, state, &states[i]);
                gp.max_new_tokens = 64; // the longest state, {"mood":"afraid","trust":10}, is 29 characters
                params.push_back(gp);
            }
            ok(gpt2_generate_batch(sessions.data(), prompts.data(), params.data(), n, &e), e);
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
                ready_ms[line] = ms_since(queue.asked[line]);
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
    if (!state) {
        std::printf("No states: %s\n(the states need a model whose vocabulary writes JSON, such as GPT-2's: npc GPT2_MODEL.gguf)\n\n", no_state.c_str());
    } else {
        std::printf("The characters' states, JSON the schema holds, read by the game:\n");
        for (size_t i = 0; i < n; i++) {
            State st;
            if (parsed_state(states[i].text, &st)) std::printf("  %s %s [the game: mood %s, trust %d]\n", cast[i].c_str(), states[i].text.c_str(), st.mood, st.trust);
            else std::printf("  %s %s [the game: unreadable, ran out of tokens]\n", cast[i].c_str(), states[i].text.c_str());
        }
        std::printf("\n");
    }

    // Load the save game into a new session (with the same params: the context policy is not
    // saved): Romeo must say exactly what he said after the save.
    int status = 1;
    gpt2_session* restored = nullptr;
    Queue unused;
    Speech again{0, &unused, {}, GPT2_MATCH_NONE, {}};
    gpt2_generate_params gp = speech_params(2000, line, &again);
    std::string then;
    if (!save_game.empty() && ok(gpt2_session_create(model, &sp, &restored, &err), err) &&
        ok(gpt2_session_load(restored, save_game.data(), save_game.size(), &err), err) &&
        pick_action(model, restored, ask_prompt, actions[0], &again, &then, &err) && ok(gpt2_generate_text(restored, then.c_str(), &gp, &err), err)) {
        status = again.text == lines[n].text && again.tokens == lines[n].tokens ? 0 : 1;
        std::printf("Saved ROMEO after his first speech (%zu bytes) and loaded him into a new session: %s (%zu tokens).\n",
                    save_game.size(), status == 0 ? "he says the same" : "HE SAYS SOMETHING ELSE", again.tokens.size());
    }
    gpt2_session_free(restored);

    size_t tokens = 0;
    for (size_t i = 0; i < n; i++) tokens += lines[i].tokens.size();
    std::printf("%zu characters' actions chosen (gpt2_choose) in %.0f ms, their lines on one stage on one worker thread, each joining when asked: %zu tokens in %.2f s, %.0f tokens/s together\n",
                n, choose_ms, tokens, batch_s, batch_s > 0 ? tokens / batch_s : 0.0);
    std::printf("Lines ready (whole, on the main thread), from when each was asked for:\n ");
    for (size_t i = 0; i <= n; i++) {
        const std::string who = i < n ? cast[i] : "ROMEO again";
        if (ready_ms[i] < 0) std::printf("%s %s never (ran out of tokens)", i ? "," : "", who.c_str());
        else std::printf("%s %s %.0f ms", i ? "," : "", who.c_str(), ready_ms[i]);
    }
    std::printf("\n");
    print_frames(frame_ms, 1000.0 / 60, max_work_ms);
    for (gpt2_session* session : sessions) gpt2_session_free(session);
    gpt2_grammar_free(line);
    gpt2_grammar_free(state);
    gpt2_model_free(model); // after every session and grammar is freed
    return status;
}
