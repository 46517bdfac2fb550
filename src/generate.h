#ifndef GPT2__PART_GENERATE_H
#define GPT2__PART_GENERATE_H
#include "session.h"
#include "grammar/matcher.h"

/* The generation engine: gpt2_generate, gpt2_generate_batch and the stage after their checks.
   One step (gpt2__lines_step) takes every unfinished line a token further: each picks its next
   token from its logits (the sampling chain of sampler.h on the host, with the grammar's mask
   when it has one, or the backend's own draw), delivers its text (stop strings held back until they are sure, UTF-8 characters
   whole), and every picked token joins its context in one pass (gpt2__batch_append). Where the
   grammar then allows only one text, that text's tokens join in the same pass, as a prompt's do,
   and so does the prompt of a line that has just joined. A lone generation is a batch of one. */

/* Where the first stop string in `text` starts (the earliest, when several are there), or npos. */
static size_t gpt2__find_stop(std::string_view text, const gpt2_generate_params& p) {
    size_t first = std::string_view::npos;
    for (size_t i = 0; i < p.n_stop; i++) first = std::min(first, text.find(p.stop[i]));
    return first;
}

/* Length of the longest end of `text` that is the beginning of a stop string: the text a later
   token may still complete into one. */
static size_t gpt2__stop_tail(std::string_view text, const gpt2_generate_params& p) {
    size_t longest = 0;
    for (size_t i = 0; i < p.n_stop; i++) {
        const std::string_view stop = p.stop[i];
        for (size_t len = std::min(text.size(), stop.size() - 1); len > longest; len--)
            if (text.substr(text.size() - len) == stop.substr(0, len)) {
                longest = len;
                break;
            }
    }
    return longest;
}

/* Hands on_token the text that `token` releases (gpt2_token_fn says which). `held` is the text
   not delivered yet, waiting on the stop strings. True when generation ends here, and *why says
   why: the token completes a stop string (*at_stop, and what follows it is dropped), on_token
   asks to, or it is the end-of-text token with stop_at_eos or a grammar, whose sentence ends
   there (its text is not delivered). */
static bool gpt2__deliver(gpt2_session* s, const gpt2_generate_params& p, int32_t token, gpt2__string* held, bool* at_stop, gpt2_end* why) {
    const gpt2__tokenizer& tok = s->model->tokenizer;
    const bool at_eos = (p.stop_at_eos || p.grammar) && token == tok.eos; /* a grammar's sentence ends there */
    const gpt2_end eos_end = p.grammar ? GPT2_END_GRAMMAR : GPT2_END_EOS;
    if (tok.kind == GPT2_TOKENIZER_NONE || (!p.on_token && p.n_stop == 0)) {
        const bool caller_stops = p.on_token && p.on_token(p.user, token, nullptr, 0) != 0;
        *why = caller_stops ? GPT2_END_CALLBACK : eos_end;
        return caller_stops || at_eos;
    }
    size_t release = 0;
    if (!at_eos) {
        gpt2__utf8_stream_push(&s->stream, gpt2__tokenizer_token_bytes(&tok, token), held);
        release = gpt2__find_stop(*held, p);
        *at_stop = release != std::string_view::npos;
        if (!*at_stop) release = held->size() - gpt2__stop_tail(*held, p);
    }
    s->text.assign(held->data(), release);
    held->erase(0, release);
    if (*at_stop) {
        held->clear();
        s->stream = gpt2__utf8_stream();
    }
    const bool caller_stops = p.on_token && p.on_token(p.user, token, s->text.c_str(), s->text.size()) != 0;
    *why = *at_stop ? GPT2_END_STOP : caller_stops ? GPT2_END_CALLBACK : eos_end;
    return caller_stops || at_eos || *at_stop;
}

/* The chain's draw: the backend's own (sample_chain) where it serves the parameters, else the
   host's: the backend's logits, copied, filtered and drawn with the session's RNG. */
struct gpt2__chain_buffers {
    gpt2__vector<float> logits, scratch;
    gpt2__vector<int> counts;
    gpt2__vector<uint32_t> allowed; /* with a grammar: its mask, a bit per token */
};

static gpt2_result gpt2__sample_chain(gpt2_session* s, const gpt2_generate_params& p, gpt2__chain_buffers* b, int32_t* token, gpt2_error* err) {
    const int V = s->model->n_vocab;
    const uint32_t* allowed = p.grammar ? b->allowed.data() : nullptr;
    /* a chain of the grammar's mask, top_k, top_p and temperature alone may run where the logits are */
    if (s->backend->sample_chain && !gpt2__penalties_on(p) && p.n_logit_bias == 0 && !p.on_logits && p.min_p <= 0.0f) {
        const gpt2_result r = s->backend->sample_chain(s, p.temperature, p.top_k, p.top_p, allowed, token, err);
        if (r != GPT2__NOT_HANDLED) return r;
    }
    const float* logits = s->backend->logits(s);
    if (!logits) return gpt2__fail(err, GPT2_ERROR_DEVICE, "the %s backend could not return the logits", s->backend->name);
    std::memcpy(b->logits.data(), logits, (size_t)V * sizeof(float));
    GPT2__TRY(gpt2__chain_filter(b->logits.data(), V, p, s->tokens.data(), s->tokens.size(), allowed, b->scratch.data(), b->counts.data(), err));
    *token = gpt2__chain_draw(b->logits.data(), V, p, &s->rng_state, b->scratch.data());
    return GPT2_OK;
}

/* One session's generation, a step at a time, driven by gpt2__generate: begin, then per step
   pick (sample a token, and with a grammar add the tokens of the text it then forces), deliver
   each (hand its text on; true when generation ends with it) and append them to the context,
   and end (what is still held back for the stop strings). */
enum { GPT2__STEP_COMPLETE = 1, GPT2__STEP_FINISHED = 2, GPT2__MAX_FORCED_BYTES = 256 };
struct gpt2__generator {
    gpt2_session* s = nullptr;
    gpt2_generate_params p;
    bool chain = false; /* off: the backend samples as nanoGPT does, on its device */
    gpt2__chain_buffers buffers;
    gpt2__grammar_matcher grammar; /* with p.grammar: where the text generated so far stands */
    gpt2__vector<int32_t> step;       /* this step's tokens: the one drawn, then any forced */
    gpt2__vector<uint8_t> step_match; /* with a grammar, after each of them: GPT2__STEP_ bits */
    bool complete = false;            /* with a grammar: the text delivered so far is a sentence */
    int n_forced = 0;                 /* tokens the grammar forced (not drawn) */
    gpt2__string forced_text;
    gpt2__vector<int32_t> forced_ids;
    gpt2__string held; /* text not delivered yet: see gpt2_token_fn */
    bool at_stop = false;
    gpt2_end end = GPT2_END_MAX_TOKENS; /* why it ended, once it has */
    int n_new = 0;     /* tokens delivered */
    int32_t* out_tokens = nullptr;
    size_t capacity = 0;
    size_t* n_generated = nullptr;
};

static void gpt2__generator_begin(gpt2__generator* g, gpt2_session* s, const gpt2_generate_params& p, int32_t* out_tokens, size_t capacity, size_t* n_generated) {
    g->s = s;
    g->p = p;
    g->out_tokens = out_tokens;
    g->capacity = capacity;
    g->n_generated = n_generated;
    s->rng_state = p.seed;
    g->chain = gpt2__chain_on(p);
    if (g->chain) {
        const size_t V = (size_t)s->model->n_vocab;
        g->buffers.logits.resize(V);
        g->buffers.scratch.resize(V);
        g->buffers.counts.assign(V, 0);
        if (p.grammar) {
            g->buffers.allowed.resize((V + 31) / 32);
            gpt2__matcher_begin(&g->grammar, p.grammar);
            g->complete = g->grammar.state.complete;
        }
    }
}

/* The grammar's part of a pick: the mask before the draw, then the state after the token. */
static gpt2_result gpt2__generator_mask(gpt2__generator* g, gpt2_error* err) {
    GPT2__TRY(gpt2__matcher_mask(&g->grammar, g->buffers.allowed.data(), err));
    for (uint32_t word : g->buffers.allowed)
        if (word) return GPT2_OK;
    return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "grammar: no token of the model's vocabulary continues the text generated so far (%d tokens) "
                      "as the grammar asks: it needs characters the vocabulary lacks", g->n_new);
}

/* Moves the grammar over `token` and adds it to the step. */
static gpt2_result gpt2__generator_follow(gpt2__generator* g, int32_t token, gpt2_error* err) {
    g->step.push_back(token);
    if (!g->p.grammar) return GPT2_OK;
    if (token != g->s->model->tokenizer.eos) {
        bool alive;
        GPT2__TRY(gpt2__matcher_feed(&g->grammar, gpt2__tokenizer_token_bytes(&g->s->model->tokenizer, token), &alive, err));
        if (!alive) return gpt2__fail(err, GPT2_ERROR_INTERNAL, "grammar: token %d was drawn but leaves the grammar (a bug in the mask)", (int)token);
    }
    const gpt2__gstate& st = g->grammar.state;
    g->step_match.push_back((uint8_t)((st.complete && st.need == 0 ? GPT2__STEP_COMPLETE : 0) | (gpt2__matcher_finished(g->grammar) ? GPT2__STEP_FINISHED : 0)));
    return GPT2_OK;
}

/* Forced text: where the grammar allows only one text next, its tokens, as the tokenizer writes
   that text, join the step (a sampled token would have no other choice, one by one). The last
   is left to the next draw, which may extend it (`"` before a value: the model may write `"a`),
   unless the text ends the sentence. A text the vocabulary cannot write is left to the draws,
   whose mask then says what is missing. */
static gpt2_result gpt2__generator_force(gpt2__generator* g, gpt2_error* err) {
    const int room = g->p.max_new_tokens - g->n_new - (int)g->step.size();
    if (room <= 0 || gpt2__matcher_finished(g->grammar)) return GPT2_OK;
    bool finishes = false;
    gpt2__matcher_forced_text(&g->grammar, GPT2__MAX_FORCED_BYTES, &g->forced_text, &finishes);
    if (g->forced_text.empty()) return GPT2_OK;
    gpt2_error ignored;
    g->forced_ids.clear();
    if (gpt2__tokenizer_encode(&g->s->model->tokenizer, g->forced_text.data(), g->forced_text.size(), false, &g->forced_ids, &ignored) != GPT2_OK) return GPT2_OK;
    size_t n = std::min(g->forced_ids.size() - (finishes ? 0 : 1), (size_t)room);
    for (size_t k = 0; k < n; k++) GPT2__TRY(gpt2__generator_follow(g, g->forced_ids[k], err));
    g->n_forced += (int)n;
    return GPT2_OK;
}

/* This step's tokens: drawn (on the host's chain or the backend), then with a grammar the
   forced text's; at the start, the forced text alone when there is some. */
static gpt2_result gpt2__generator_pick(gpt2__generator* g, gpt2_error* err) {
    g->step.clear();
    g->step_match.clear();
    int32_t token;
    if (!g->chain) {
        GPT2__TRY(g->s->backend->sample(g->s, g->p.temperature, g->p.top_k, &token, err));
        return gpt2__generator_follow(g, token, err);
    }
    if (g->p.grammar && g->n_new == 0 && g->n_forced == 0) {
        GPT2__TRY(gpt2__generator_force(g, err));
        if (!g->step.empty()) return GPT2_OK;
    }
    if (g->p.grammar) GPT2__TRY(gpt2__generator_mask(g, err));
    GPT2__TRY(gpt2__sample_chain(g->s, g->p, &g->buffers, &token, err));
    GPT2__TRY(gpt2__generator_follow(g, token, err));
    return g->p.grammar && token != g->s->model->tokenizer.eos ? gpt2__generator_force(g, err) : GPT2_OK;
}

/* Delivers the step's token k. True when generation ends with it: the caller's on_token, a stop,
   max_new_tokens, or a sentence of the grammar that nothing may extend. */
static bool gpt2__generator_deliver(gpt2__generator* g, size_t k) {
    const int32_t token = g->step[k];
    const int i = g->n_new++;
    if (g->out_tokens && (size_t)i < g->capacity) g->out_tokens[i] = token;
    if (g->n_generated) *g->n_generated = (size_t)i + 1;
    bool sentence_ends = false;
    if (g->p.grammar) {
        g->complete = g->step_match[k] & GPT2__STEP_COMPLETE;
        sentence_ends = g->step_match[k] & GPT2__STEP_FINISHED;
    }
    if (gpt2__deliver(g->s, g->p, token, &g->held, &g->at_stop, &g->end)) return true;
    g->end = sentence_ends ? GPT2_END_GRAMMAR : GPT2_END_MAX_TOKENS;
    return g->n_new >= g->p.max_new_tokens || sentence_ends;
}

static void gpt2__generator_end(gpt2__generator* g) {
    gpt2_session* s = g->s;
    const gpt2_generate_params& p = g->p;
    if (p.grammar && p.grammar_match) *p.grammar_match = g->complete ? GPT2_MATCH_COMPLETE : GPT2_MATCH_PREFIX;
    if (p.end) *p.end = g->end;
    if (s->model->tokenizer.kind == GPT2_TOKENIZER_NONE || g->at_stop) return;
    /* what is still held: bytes that never formed a character, text that did not become a stop string */
    gpt2__utf8_stream_flush(&s->stream, &g->held);
    g->held.resize(std::min(g->held.size(), gpt2__find_stop(g->held, p))); /* a stop string that is not UTF-8 text */
    if (p.on_token && !g->held.empty()) {
        s->text.assign(g->held);
        p.on_token(p.user, -1, s->text.c_str(), s->text.size());
    }
}

/* A generation on its way (gpt2_generate's, one of gpt2_generate_batch's, a line of a
   gpt2_stage): its generator, and the prompt the next pass prefills beside the other lines'
   tokens. A line that fails alone (its grammar's mask) ends with `result` and `error`; a pass
   that fails fails them all (gpt2__lines_step's result). */
struct gpt2__line {
    gpt2__generator g;
    gpt2__vector<int32_t> prompt; /* not in the context yet */
    bool ends = false;            /* this step was its last */
    gpt2_result result = GPT2_OK;
    gpt2_error error{};
};

/* What a step reuses from one to the next. */
struct gpt2__step_work {
    gpt2__vector<gpt2__line*> plain;
    gpt2__vector<gpt2_session*> batch, plain_sessions;
    gpt2__vector<const int32_t*> ids;
    gpt2__vector<size_t> counts;
    gpt2__vector<int32_t> plain_tokens;
    gpt2__vector<float> temperatures;
    gpt2__vector<int> top_ks;
    gpt2__vector<gpt2__append_undo> undo; /* the pass's, between its begin and its end */
};

/* Sessions that sample as nanoGPT does draw together on the runner's threads where the backend
   can (sample_batch); the others, which may run the caller's on_logits, pick on the calling
   thread. A pick that fails ends its line alone. */
static gpt2_result gpt2__lines_pick(gpt2_session* runner, gpt2__line* const* lines, size_t n, size_t n_picking, gpt2__step_work* w, gpt2_error* err) {
    w->plain.clear();
    for (size_t i = 0; i < n; i++) {
        gpt2__line* line = lines[i];
        if (!line->prompt.empty() || line->g.p.max_new_tokens == 0) continue;
        if (!line->g.chain && runner->backend->sample_batch && n_picking > 1) {
            w->plain.push_back(line);
        } else if ((line->result = gpt2__generator_pick(&line->g, &line->error)) != GPT2_OK) {
            line->ends = true;
            line->g.step.clear();
        }
    }
    if (w->plain.empty()) return GPT2_OK;
    w->plain_sessions.clear();
    w->temperatures.clear();
    w->top_ks.clear();
    for (gpt2__line* line : w->plain) {
        w->plain_sessions.push_back(line->g.s);
        w->temperatures.push_back(line->g.p.temperature);
        w->top_ks.push_back(line->g.p.top_k);
    }
    w->plain_tokens.resize(w->plain.size());
    GPT2__TRY(runner->backend->sample_batch(runner, w->plain_sessions.data(), w->plain.size(), w->temperatures.data(), w->top_ks.data(), w->plain_tokens.data(), err));
    for (size_t j = 0; j < w->plain.size(); j++) {
        w->plain[j]->g.step.assign(1, w->plain_tokens[j]);
        w->plain[j]->g.step_match.clear();
    }
    return GPT2_OK;
}

/* One step of every line, in one pass over the weights on the threads of `runner`: a line with
   a prompt prefills it; the others pick their next token (and any the grammar forces), deliver
   it, and append it to their context (the token that ends a generation joins its context too;
   forced ones after it do not). Afterwards `ends` marks the lines that are done; their
   generators are ended. An error of the pass itself (aborted by runner's abort_fn, the device)
   is returned, and the sessions are as gpt2__batch_append leaves them. In three parts for the
   stage, whose pass may pause between its begin and its end (gpt2__batch_run, GPT2__PAUSED). */
static gpt2_result gpt2__lines_step_begin(gpt2_session* runner, gpt2__line* const* lines, size_t n, gpt2__step_work* w, gpt2_error* err) {
    size_t n_picking = 0;
    for (size_t i = 0; i < n; i++) n_picking += lines[i]->prompt.empty() && lines[i]->g.p.max_new_tokens > 0;
    GPT2__TRY(gpt2__lines_pick(runner, lines, n, n_picking, w, err));
    w->batch.clear();
    w->ids.clear();
    w->counts.clear();
    for (size_t i = 0; i < n; i++) {
        gpt2__line* line = lines[i];
        gpt2__generator& g = line->g;
        size_t count = line->prompt.size();
        const int32_t* ids = line->prompt.data();
        if (g.p.max_new_tokens == 0) line->ends = true; /* its prompt, if any, is all this step does */
        if (count == 0 && line->result == GPT2_OK) {
            while (!line->ends && count < g.step.size()) line->ends = gpt2__generator_deliver(&g, count++);
            ids = g.step.data();
        }
        if (count == 0) continue;
        w->batch.push_back(g.s);
        w->ids.push_back(ids);
        w->counts.push_back(count);
    }
    gpt2__batch_append_begin(runner, w->batch.data(), w->ids.data(), w->counts.data(), w->batch.size(), &w->undo);
    return GPT2_OK;
}

/* The pass's result `res` on the sessions; when it ran, the prompts are in and the lines that
   ended are ended. */
static void gpt2__lines_step_end(gpt2__line* const* lines, size_t n, gpt2__step_work* w, gpt2_result res) {
    gpt2__batch_append_end(w->batch.data(), w->batch.size(), res, &w->undo);
    if (res != GPT2_OK) return;
    for (size_t i = 0; i < n; i++) {
        lines[i]->prompt.clear();
        if (lines[i]->ends && lines[i]->result == GPT2_OK) gpt2__generator_end(&lines[i]->g);
    }
}

static gpt2_result gpt2__lines_step(gpt2_session* runner, gpt2__line* const* lines, size_t n, gpt2__step_work* w, gpt2_error* err) {
    GPT2__TRY(gpt2__lines_step_begin(runner, lines, n, w, err));
    const gpt2_result res = w->batch.empty() ? GPT2_OK : gpt2__batch_run(runner, w->batch.data(), w->batch.size(), err);
    gpt2__lines_step_end(lines, n, w, res);
    return res;
}

/* A line is over with `res`: GPT2_OK when it ended (gpt2__generator_end said why), else why it
   failed (`message`): its end becomes GPT2_END_ABORTED or GPT2_END_ERROR. Its on_end hears it. */
static void gpt2__line_over(gpt2__line* line, gpt2_result res, const char* message) {
    gpt2__generator* g = &line->g;
    if (res != GPT2_OK) {
        g->end = res == GPT2_ERROR_ABORTED ? GPT2_END_ABORTED : GPT2_END_ERROR;
        if (g->p.end) *g->p.end = g->end;
    }
    if (g->p.on_end) g->p.on_end(g->p.user, g->end, res, res == GPT2_OK ? "" : message);
}

/* Steps every line until all are done (gpt2_generate: one line; gpt2_generate_batch: many). The
   first line that fails fails the call, with its message. */
static gpt2_result gpt2__generate(gpt2_session* runner, gpt2__line* lines, size_t n, gpt2_error* err) {
    gpt2__vector<gpt2__line*> active;
    for (size_t i = 0; i < n; i++) active.push_back(&lines[i]);
    gpt2__step_work work;
    while (!active.empty()) {
        GPT2__TRY(gpt2__lines_step(runner, active.data(), active.size(), &work, err));
        size_t kept = 0;
        for (gpt2__line* line : active) {
            if (line->result != GPT2_OK) {
                if (err) *err = line->error;
                return line->result;
            }
            if (!line->ends) active[kept++] = line;
        }
        active.resize(kept);
    }
    return GPT2_OK;
}

#endif /* GPT2__PART_GENERATE_H */
