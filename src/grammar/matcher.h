#ifndef GPT2__PART_GRAMMAR_MATCHER_H
#define GPT2__PART_GRAMMAR_MATCHER_H
#include "gbnf.h"

/* Matching text against a grammar, a character at a time, and the token masks built on it.

   The parser's state is the set of every way the text so far can continue: a set of stacks, as
   in llama.cpp's grammar sampler. A stack's top is a character class the next character may
   match; below it, where to return to when the rule it is in ends. The stacks share their
   tails: a stack is a node (a position in the grammar, the node below it), nodes are interned
   (one node per position and node below), so a state is a sorted list of node ids and two
   states are equal exactly when their lists are. An ambiguous grammar keeps many stacks alive;
   their number is bounded (GPT2__GRAMMAR_MAX_STACKS, an error beyond it), and a call that
   returns to a rule's end pops at once (x* is r ::= x r | empty: its stack does not grow).

   Text is bytes and the grammar reads code points: a state carries the UTF-8 character it is
   inside, and a byte that starts or continues one is kept only when some top's class holds a
   code point beginning with those bytes. */

enum { GPT2__GRAMMAR_MAX_STACKS = 1 << 12, GPT2__CLOSURE_MAX_STEPS = 1 << 20, GPT2__GSS_MAX_NODES = 1 << 24, GPT2__GSS_COMPACT_AT = 1 << 18 };

struct gpt2__gnode {
    uint32_t pos;    /* an index into gpt2_grammar::elems */
    uint32_t parent; /* the node below; 0 is the empty stack (the sentence ends there) */
};

struct gpt2__gstate {
    gpt2__vector<uint32_t> tops; /* node ids whose pos is a character class, sorted */
    bool complete = false;       /* the text so far is a whole sentence */
    bool escaped = false;        /* a rule ended over gpt2__gss::unknown (gpt2__context_tokens_make) */
    uint8_t lead = 0;            /* inside a UTF-8 character: its first byte; 0 = between characters */
    uint8_t need = 0;            /* its bytes still to come */
    uint32_t partial = 0;        /* its bits so far */
};

/* A closure gpt2__gstate_advance made: from the stacks a code point continued (`continued`,
   the work it started from) to the state's tops. */
struct gpt2__advanced {
    uint32_t continued_begin, continued_end; /* in gpt2__gss::advanced_continued */
    uint32_t tops_begin, tops_end;           /* in gpt2__gss::advanced_tops */
    bool complete, escaped;
};

/* The nodes (graph-structured stack) and the scratch of the closure. */
struct gpt2__gss {
    const gpt2_grammar* g = nullptr;
    gpt2__vector<gpt2__gnode> nodes;
    gpt2__vector<uint32_t> slots; /* open addressing: node ids by (pos, parent); 0 = free */
    gpt2__vector<uint32_t> seen;  /* per node: the closure that last met it */
    uint32_t epoch = 0;
    gpt2__vector<gpt2__gnode> work;
    bool overflow = false; /* too many stacks or nodes: the grammar is too ambiguous */
    uint32_t unknown = UINT32_MAX; /* a node standing for a stack not known (gpt2__context_tokens_make) */
    /* gpt2__gstate_advance's closures by the stacks the code point continued: every code point
       a state's classes take alike (each letter, each CJK character inside a JSON string) leads
       to the state one closure found. Forgotten when full and when nodes are renumbered. */
    std::unordered_map<uint64_t, uint32_t, std::hash<uint64_t>, std::equal_to<uint64_t>, gpt2__allocator<std::pair<const uint64_t, uint32_t>>> advanced_index;
    gpt2__vector<gpt2__advanced> advanced;
    gpt2__vector<gpt2__gnode> advanced_continued;
    gpt2__vector<uint32_t> advanced_tops;
};

enum { GPT2__ADVANCED_MAX = 1 << 12 };

static void gpt2__gss_forget_advanced(gpt2__gss* s) {
    s->advanced_index.clear();
    s->advanced.clear();
    s->advanced_continued.clear();
    s->advanced_tops.clear();
}

static uint32_t gpt2__gss_hash(uint32_t pos, uint32_t parent) {
    uint64_t h = ((uint64_t)pos << 32 | parent) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32);
}

static void gpt2__gss_rehash(gpt2__gss* s, size_t n_slots) {
    s->slots.assign(n_slots, 0);
    const uint32_t mask = (uint32_t)n_slots - 1;
    for (uint32_t id = 1; id < s->nodes.size(); id++) {
        uint32_t i = gpt2__gss_hash(s->nodes[id].pos, s->nodes[id].parent) & mask;
        while (s->slots[i]) i = (i + 1) & mask;
        s->slots[i] = id;
    }
}

/* The stacks of no text, whatever `s` held before (its memory is kept). */
static void gpt2__gss_init(gpt2__gss* s, const gpt2_grammar* g) {
    s->g = g;
    s->nodes.assign(1, gpt2__gnode{UINT32_MAX, 0});
    s->seen.assign(1, 0);
    s->work.clear();
    s->overflow = false;
    s->unknown = UINT32_MAX;
    gpt2__gss_rehash(s, 1024);
    gpt2__gss_forget_advanced(s);
}

static uint32_t gpt2__gss_intern(gpt2__gss* s, uint32_t pos, uint32_t parent) {
    uint32_t mask = (uint32_t)s->slots.size() - 1;
    uint32_t i = gpt2__gss_hash(pos, parent) & mask;
    for (; s->slots[i]; i = (i + 1) & mask) {
        const gpt2__gnode& n = s->nodes[s->slots[i]];
        if (n.pos == pos && n.parent == parent) return s->slots[i];
    }
    if (s->nodes.size() >= GPT2__GSS_MAX_NODES) {
        s->overflow = true;
        return 0;
    }
    const uint32_t id = (uint32_t)s->nodes.size();
    s->nodes.push_back({pos, parent});
    s->seen.push_back(0);
    if (s->nodes.size() * 2 > s->slots.size()) gpt2__gss_rehash(s, s->slots.size() * 2);
    else s->slots[i] = id;
    return id;
}

/* Follows every way from the positions in s->work (each with the node below it) to the next
   character class, into `out`: a rule reference opens each of its alternatives, an
   alternative's end returns to the node below. */
static void gpt2__gss_closure(gpt2__gss* s, gpt2__gstate* out) {
    const gpt2_grammar& g = *s->g;
    if (++s->epoch == 0) { /* wrapped: forget every mark */
        std::fill(s->seen.begin(), s->seen.end(), 0);
        s->epoch = 1;
    }
    out->tops.clear();
    out->complete = out->escaped = false;
    for (size_t steps = 0; !s->work.empty() && !s->overflow; steps++) {
        if (steps > GPT2__CLOSURE_MAX_STEPS) { /* ambiguity that makes no stacks yet: bounded work all the same */
            s->overflow = true;
            break;
        }
        gpt2__gnode at = s->work.back();
        s->work.pop_back();
        while (g.elems[at.pos].kind == GPT2__G_END) {
            if (at.parent == 0 || at.parent == s->unknown) break;
            at = s->nodes[at.parent];
        }
        const gpt2__gelem e = g.elems[at.pos];
        if (e.kind == GPT2__G_END) {
            (at.parent == 0 ? out->complete : out->escaped) = true;
            continue;
        }
        const uint32_t id = gpt2__gss_intern(s, at.pos, at.parent);
        if (s->seen[id] == s->epoch) continue;
        s->seen[id] = s->epoch;
        if (e.kind == GPT2__G_CHARS) {
            out->tops.push_back(id);
            if (out->tops.size() > GPT2__GRAMMAR_MAX_STACKS) s->overflow = true; /* before the work grows further */
            continue;
        }
        /* the rule's alternatives, returning after the reference (or straight to the node
           below when nothing follows it there: tail calls keep repetitions flat) */
        const uint32_t ret = g.elems[at.pos + 1].kind == GPT2__G_END ? at.parent : gpt2__gss_intern(s, at.pos + 1, at.parent);
        const gpt2__grule& r = g.rules[e.value];
        for (uint32_t a = r.alts_begin; a < r.alts_end; a++) s->work.push_back({g.alt_starts[a], ret});
    }
    std::sort(out->tops.begin(), out->tops.end());
    if (s->overflow) { /* dead: the caller reports it */
        out->tops.clear();
        out->complete = out->escaped = false;
        s->work.clear();
    }
}

/* The state before any text: the start rule's alternatives. */
static void gpt2__gstate_start(gpt2__gss* s, gpt2__gstate* out) {
    const gpt2__grule& r = s->g->rules[s->g->root];
    for (uint32_t a = r.alts_begin; a < r.alts_end; a++) s->work.push_back({s->g->alt_starts[a], 0});
    gpt2__gss_closure(s, out);
    out->lead = out->need = 0;
    out->partial = 0;
}

/* The state after one more code point; false when the text cannot continue with it. */
static bool gpt2__gstate_advance(gpt2__gss* s, const gpt2__gstate& from, uint32_t cp, gpt2__gstate* to) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t id : from.tops) {
        const gpt2__gnode n = s->nodes[id];
        if (gpt2__class_has(s->g->classes[s->g->elems[n.pos].value], cp)) {
            s->work.push_back({n.pos + 1, n.parent});
            h = (h ^ id) * 0x100000001b3ull;
        }
    }
    const auto found = s->advanced_index.find(h);
    if (found != s->advanced_index.end()) {
        const gpt2__advanced& a = s->advanced[found->second];
        const size_t n = a.continued_end - a.continued_begin;
        bool same = n == s->work.size();
        for (size_t k = 0; same && k < n; k++) {
            const gpt2__gnode& was = s->advanced_continued[a.continued_begin + k];
            same = was.pos == s->work[k].pos && was.parent == s->work[k].parent;
        }
        if (same) {
            s->work.clear();
            to->tops.assign(s->advanced_tops.begin() + a.tops_begin, s->advanced_tops.begin() + a.tops_end);
            to->complete = a.complete;
            to->escaped = a.escaped;
            return !to->tops.empty() || to->complete || to->escaped;
        }
    }
    const bool remember = found == s->advanced_index.end(); /* else another set of stacks has the hash: not kept */
    if (remember && s->advanced.size() >= GPT2__ADVANCED_MAX) gpt2__gss_forget_advanced(s);
    gpt2__advanced a{(uint32_t)s->advanced_continued.size(), 0, 0, 0, false, false};
    if (remember) s->advanced_continued.insert(s->advanced_continued.end(), s->work.begin(), s->work.end());
    gpt2__gss_closure(s, to);
    if (remember && !s->overflow) {
        a.continued_end = (uint32_t)s->advanced_continued.size();
        a.tops_begin = (uint32_t)s->advanced_tops.size();
        s->advanced_tops.insert(s->advanced_tops.end(), to->tops.begin(), to->tops.end());
        a.tops_end = (uint32_t)s->advanced_tops.size();
        a.complete = to->complete;
        a.escaped = to->escaped;
        s->advanced_index.emplace(h, (uint32_t)s->advanced.size());
        s->advanced.push_back(a);
    } else if (remember) {
        s->advanced_continued.resize(a.continued_begin);
    }
    return !to->tops.empty() || to->complete || to->escaped;
}

/* Whether some top's class holds a code point in [lo, hi]. */
static bool gpt2__gstate_meets(const gpt2__gss* s, const gpt2__gstate& st, uint32_t lo, uint32_t hi) {
    for (uint32_t id : st.tops)
        if (gpt2__class_meets(s->g->classes[s->g->elems[s->nodes[id].pos].value], lo, hi)) return true;
    return false;
}

/* The state after one more byte; false when no sentence continues the text with it. */
static bool gpt2__gstate_advance_byte(gpt2__gss* s, const gpt2__gstate& from, uint8_t b, gpt2__gstate* to) {
    uint32_t partial;
    uint8_t need, lead;
    if (from.need == 0) {
        if (b < 0x80) {
            to->lead = to->need = 0;
            to->partial = 0;
            return gpt2__gstate_advance(s, from, b, to);
        }
        if (b >= 0xC2 && b <= 0xDF) need = 1, partial = b & 0x1Fu;
        else if (b >= 0xE0 && b <= 0xEF) need = 2, partial = b & 0x0Fu;
        else if (b >= 0xF0 && b <= 0xF4) need = 3, partial = b & 0x07u;
        else return false;
        lead = b;
    } else {
        /* the second byte's range is narrower after E0 (overlong), ED (surrogates), F0 (overlong), F4 (> U+10FFFF) */
        const bool second = (from.lead >= 0xE0 && from.need == (from.lead >= 0xF0 ? 3 : 2));
        const uint8_t lo = second && from.lead == 0xE0 ? 0xA0 : second && from.lead == 0xF0 ? 0x90 : 0x80;
        const uint8_t hi = second && from.lead == 0xED ? 0x9F : second && from.lead == 0xF4 ? 0x8F : 0xBF;
        if (b < lo || b > hi) return false;
        need = (uint8_t)(from.need - 1);
        partial = from.partial << 6 | (b & 0x3Fu);
        lead = from.lead;
        if (need == 0) {
            to->lead = to->need = 0;
            to->partial = 0;
            return gpt2__gstate_advance(s, from, partial, to);
        }
    }
    /* inside a character: the same stacks, kept while some class holds a code point it can become
       (no shorter sequence could write it: the lead's length sets the least) */
    const uint32_t least = lead < 0xE0 ? 0x80 : lead < 0xF0 ? 0x800 : 0x10000;
    const uint32_t lo = std::max(partial << (6 * need), least), hi = std::min((partial << (6 * need)) | ((1u << (6 * need)) - 1), 0x10FFFFu);
    if (!gpt2__gstate_meets(s, from, lo, hi)) return false;
    to->tops = from.tops;
    to->complete = to->escaped = false;
    to->lead = lead;
    to->need = need;
    to->partial = partial;
    return true;
}

/* Keeps only the nodes `st` reaches (renumbered, in the same order): a long generation makes
   nodes for every prefix the masks tried. */
static void gpt2__gss_compact(gpt2__gss* s, gpt2__gstate* st) {
    gpt2__vector<uint32_t> new_id(s->nodes.size(), 0);
    for (uint32_t id : st->tops)
        for (uint32_t n = id; n && !new_id[n]; n = s->nodes[n].parent) new_id[n] = 1;
    gpt2__vector<gpt2__gnode> kept(1, s->nodes[0]);
    for (uint32_t id = 1; id < s->nodes.size(); id++)
        if (new_id[id]) { /* a node's parent is older than it, so it is renumbered already */
            new_id[id] = (uint32_t)kept.size();
            kept.push_back({s->nodes[id].pos, new_id[s->nodes[id].parent]});
        }
    for (uint32_t& id : st->tops) id = new_id[id];
    gpt2__gss_forget_advanced(s);
    s->nodes = std::move(kept);
    s->seen.assign(s->nodes.size(), 0);
    s->epoch = 0;
    size_t n_slots = 1024;
    while (n_slots < s->nodes.size() * 2) n_slots *= 2;
    gpt2__gss_rehash(s, n_slots);
}

static bool gpt2__gstate_equal(const gpt2__gstate& a, const gpt2__gstate& b) {
    return a.tops == b.tops && a.complete == b.complete && a.escaped == b.escaped && a.lead == b.lead && a.need == b.need && a.partial == b.partial;
}

static uint64_t gpt2__gstate_hash(const gpt2__gstate& s) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)s.escaped << 41 | (uint64_t)s.complete << 40 | (uint64_t)s.lead << 32 | (uint64_t)s.need << 24) ^ s.partial;
    for (uint32_t id : s.tops) h = (h ^ id) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* The states met in this generation, each stored once, with the steps between them and the
   masks made for them. A mask walks the vocabulary's trie a byte per node, and most nodes take a
   step taken before (inside a JSON string every ordinary byte leads back to the same state):
   read from the table, it costs no closure. A state's mask never changes, so a state the text
   comes back to costs a copy of its mask. Cleared when full, and when the nodes are renumbered
   (gpt2__gss_compact). */
enum { GPT2__STATE_TABLE_SIZE = 4096, GPT2__MASK_CACHE_SIZE = 256 };
enum : int32_t { GPT2__STEP_UNKNOWN = -1, GPT2__STEP_DEAD = -2 };
struct gpt2__state_table {
    std::unordered_map<uint64_t, int32_t, std::hash<uint64_t>, std::equal_to<uint64_t>, gpt2__allocator<std::pair<const uint64_t, int32_t>>> id_of;
    gpt2__vector<gpt2__gstate> states;
    gpt2__vector<int32_t> next;      /* 256 per state: the state after each byte, or a GPT2__STEP_ */
    gpt2__vector<int32_t> mask_slot; /* per state: where its mask is in `masks`, or -1 */
    gpt2__vector<uint32_t> masks;
    int32_t n_masks = 0;
};

static void gpt2__state_table_clear(gpt2__state_table* t) {
    t->id_of.clear();
    t->states.clear();
    t->next.clear();
    t->mask_slot.clear();
    t->masks.clear();
    t->n_masks = 0;
}

/* The id of `s`, added if new; -1 when the table is full or another state has its hash (the
   walk then goes on without the table below it). */
static int32_t gpt2__state_table_id(gpt2__state_table* t, const gpt2__gstate& s) {
    const uint64_t h = gpt2__gstate_hash(s);
    const auto found = t->id_of.find(h);
    if (found != t->id_of.end()) return gpt2__gstate_equal(t->states[(size_t)found->second], s) ? found->second : -1;
    if (t->states.size() >= GPT2__STATE_TABLE_SIZE) return -1;
    const int32_t id = (int32_t)t->states.size();
    t->id_of.emplace(h, id);
    t->states.push_back(s);
    t->next.resize(t->next.size() + 256, GPT2__STEP_UNKNOWN);
    t->mask_slot.push_back(-1);
    return id;
}

/* A state on the trie walk's path: its id in the table, or (id -1) the state itself. */
struct gpt2__walk_level {
    int32_t id = -1;
    gpt2__gstate state;
};

/* One generation's grammar: the state after the text generated so far, the scratch of the
   mask's walk over the vocabulary's trie (a state per depth), and the table of states. */
struct gpt2__grammar_matcher {
    const gpt2_grammar* g = nullptr;
    gpt2__gss gss;
    gpt2__gstate state;
    gpt2__vector<gpt2__walk_level> levels;
    gpt2__vector<const gpt2__context_tokens*> decided; /* what the contexts of the state's stacks decide */
    gpt2__vector<uint32_t> entries; /* the trie nodes they leave uncertain */
    gpt2__gstate next;              /* gpt2__matcher_feed's state after a byte */
    gpt2__state_table table;
};

/* The matcher at the start of a sentence, whatever it held: the table's states name nodes of the
   stacks made before, so they go with them. */
static void gpt2__matcher_begin(gpt2__grammar_matcher* m, const gpt2_grammar* g) {
    m->g = g;
    gpt2__gss_init(&m->gss, g);
    gpt2__state_table_clear(&m->table);
    gpt2__gstate_start(&m->gss, &m->state);
}

static gpt2_result gpt2__matcher_overflow(gpt2_error* err) {
    return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "grammar: the text so far can be read in more than %d ways at once (or needs more than %d steps "
                      "or %d stack nodes to follow); the grammar is too ambiguous: make its alternatives start differently",
                      (int)GPT2__GRAMMAR_MAX_STACKS, (int)GPT2__CLOSURE_MAX_STEPS, (int)GPT2__GSS_MAX_NODES);
}

/* Moves the state over `bytes`; *alive false when the text leaves the grammar (the state is
   then not to be used). */
static gpt2_result gpt2__matcher_feed(gpt2__grammar_matcher* m, std::string_view bytes, bool* alive, gpt2_error* err) {
    *alive = true;
    for (char c : bytes) {
        *alive = gpt2__gstate_advance_byte(&m->gss, m->state, (uint8_t)c, &m->next);
        if (m->gss.overflow) return gpt2__matcher_overflow(err);
        if (!*alive) return GPT2_OK;
        std::swap(m->state, m->next);
    }
    if (m->gss.nodes.size() > GPT2__GSS_COMPACT_AT) {
        gpt2__gss_compact(&m->gss, &m->state);
        gpt2__state_table_clear(&m->table);
    }
    return GPT2_OK;
}

/* The text so far is a whole sentence that nothing may extend. */
static bool gpt2__matcher_finished(const gpt2__grammar_matcher& m) {
    return m.state.complete && m.state.tops.empty();
}

/* The id of a state the walk reaches: none for a state inside a UTF-8 character. Those are
   many (a state per distinct start of a character in the vocabulary: hundreds, each 256 steps
   in the table) and cheap to step from (no closure: the same stacks), and the character's end
   finds its state in gpt2__gss::advanced. */
static int32_t gpt2__walk_id(gpt2__state_table* t, const gpt2__gstate& s) {
    return s.need ? -1 : gpt2__state_table_id(t, s);
}

/* The walk's step from `from` over byte b, through the table where it can; false when no
   sentence continues the text with it. */
static bool gpt2__walk_step(gpt2__grammar_matcher* m, const gpt2__walk_level& from, uint8_t b, gpt2__walk_level* to) {
    gpt2__state_table& t = m->table;
    if (from.id < 0) {
        if (!gpt2__gstate_advance_byte(&m->gss, from.state, b, &to->state)) return false;
        to->id = gpt2__walk_id(&t, to->state);
        return true;
    }
    const size_t step = (size_t)from.id * 256 + b;
    if (t.next[step] != GPT2__STEP_UNKNOWN) {
        to->id = t.next[step];
        return to->id != GPT2__STEP_DEAD;
    }
    if (!gpt2__gstate_advance_byte(&m->gss, t.states[(size_t)from.id], b, &to->state)) {
        if (!m->gss.overflow) t.next[step] = GPT2__STEP_DEAD;
        return false;
    }
    to->id = gpt2__walk_id(&t, to->state);
    if (to->id >= 0) t.next[step] = to->id;
    return true;
}

/* Sets the bit of every token of trie nodes [begin, end) (whole subtrees) whose bytes keep the
   text in the grammar, walking through the table from levels[depth - 1] of the first node (the
   state, for the whole trie). */
static gpt2_result gpt2__matcher_walk(gpt2__grammar_matcher* m, size_t begin, size_t end, uint32_t* allowed, gpt2_error* err) {
    const gpt2__token_trie& trie = m->g->model->token_trie;
    for (size_t i = begin; i < end;) {
        const size_t d = trie.depth[i];
        if (!gpt2__walk_step(m, m->levels[d - 1], trie.byte[i], &m->levels[d])) {
            if (m->gss.overflow) return gpt2__matcher_overflow(err);
            i = trie.skip[i];
            continue;
        }
        for (uint32_t k = trie.tokens_begin[i]; k < trie.tokens_begin[i + 1]; k++) {
            const int32_t token = trie.tokens[k];
            allowed[token >> 5] |= 1u << (token & 31);
        }
        i++;
    }
    return GPT2_OK;
}

/* A walk level's state: the table's copy when it has one (a step read from the table leaves
   `state` as it was). */
static const gpt2__gstate& gpt2__walk_state(const gpt2__grammar_matcher& m, const gpt2__walk_level& level) {
    return level.id >= 0 ? m.table.states[(size_t)level.id] : level.state;
}

/* Whether every plain byte (gpt2__plain_byte) leads from the level's state back to it, as in a
   JSON string's body: then a subtree of plain bytes stays inside. Cached per state id. */
static bool gpt2__loops_on_plain(gpt2__grammar_matcher* mk, gpt2__vector<int8_t>* cache, const gpt2__walk_level& level) {
    if (level.id < 0) return false;
    if (cache->size() <= (size_t)level.id) cache->resize((size_t)level.id + 1, -1);
    int8_t& known = (*cache)[(size_t)level.id];
    if (known < 0) {
        known = 1;
        gpt2__walk_level next;
        for (int b = 0x20; b < 0x7F && known; b++)
            known = !gpt2__plain_byte((uint8_t)b) || (gpt2__walk_step(mk, level, (uint8_t)b, &next) && next.id == level.id);
    }
    return known == 1;
}

/* The scratch of gpt2__context_tokens_make: a matcher over the context's stack, its table, the
   walk's levels. A grammar keeps one (under its contexts' mutex), so that a schema making tens of
   thousands of contexts does not allocate each one's anew. */
struct gpt2__context_maker {
    gpt2__grammar_matcher matcher;
    gpt2__vector<char> inside, escaped; /* per walk depth; escaped: a path passed the context's end */
    gpt2__vector<int8_t> loops;         /* gpt2__loops_on_plain's, per state id */
};

/* The grammar's maker, made on first use; NULL when out of memory. Called under g->contexts_mutex. */
static gpt2__context_maker* gpt2__context_maker_of(const gpt2_grammar* g) {
    if (!g->context_maker) {
        void* memory = GPT2_MALLOC(sizeof(gpt2__context_maker));
        if (memory) g->context_maker = new (memory) gpt2__context_maker();
    }
    return g->context_maker;
}

static void gpt2__context_maker_free(gpt2__context_maker* maker) {
    if (!maker) return;
    maker->~gpt2__context_maker();
    GPT2_FREE(maker);
}

/* Leaves every token to the walk from the state. */
static void gpt2__context_tokens_undecided(const gpt2__token_trie& trie, gpt2__context_tokens* out) {
    out->accepted.clear();
    out->uncertain.clear();
    for (size_t first = 0; first < trie.byte.size(); first = trie.skip[first]) out->uncertain.push_back((uint32_t)first | GPT2__WHOLE_SUBTREE);
}

/* The tokens a context decides alone (XGrammar's context-independent tokens, with a few nodes of
   the stack known): a walk of the trie from the stack of the context's positions over a node that
   stands for the rest of the stack, unknown. A token read whole inside the context is accepted
   whatever the rest; one refused before the context ends is refused whatever it is; the others
   pass its end, and the rest decides: uncertain. Too ambiguous to follow here: every token is
   left to the walk from the state (which then reports it). */
static void gpt2__context_tokens_make(const gpt2_grammar* g, gpt2__context_maker* maker, gpt2__context_tokens* out) {
    const gpt2_model& model = *g->model;
    const gpt2__token_trie& trie = model.token_trie;
    gpt2__grammar_matcher& mk = maker->matcher;
    mk.g = g;
    gpt2__gss& gss = mk.gss;
    gpt2__gss_init(&gss, g);
    gpt2__state_table_clear(&mk.table);
    uint32_t below = 0;
    if (out->context.size() == GPT2__CONTEXT_DEPTH) {
        gss.unknown = below = (uint32_t)gss.nodes.size();
        gss.nodes.push_back({UINT32_MAX, 0});
        gss.seen.push_back(0);
    }
    for (size_t k = out->context.size(); k-- > 0;) below = gpt2__gss_intern(&gss, out->context[k], below);
    mk.levels.resize((size_t)trie.max_depth + 1);
    mk.levels[0].state.tops.assign(1, below);
    mk.levels[0].id = gpt2__state_table_id(&mk.table, mk.levels[0].state);
    gpt2__vector<char>& inside = maker->inside;
    gpt2__vector<char>& escaped = maker->escaped;
    inside.assign((size_t)trie.max_depth + 1, 1);
    escaped.assign((size_t)trie.max_depth + 1, 0);
    gpt2__vector<int8_t>& loops = maker->loops;
    loops.clear();
    out->accepted.assign(((size_t)model.n_vocab + 31) / 32, 0);
    out->uncertain.clear();
    for (size_t i = 0; i < trie.byte.size();) {
        const size_t d = trie.depth[i];
        if (!inside[d - 1] || (out->clipped && d > GPT2__CLIP_BYTES)) { /* only paths past the context's end got here, or a
                                                                              token a clipped context cannot judge: all of the subtree is uncertain */
            out->uncertain.push_back((uint32_t)i | GPT2__WHOLE_SUBTREE);
            i = trie.skip[i];
            continue;
        }
        const bool ok = gpt2__walk_step(&mk, mk.levels[d - 1], trie.byte[i], &mk.levels[d]);
        if (gss.overflow) {
            gpt2__context_tokens_undecided(trie, out);
            return;
        }
        const gpt2__gstate* st = ok ? &gpt2__walk_state(mk, mk.levels[d]) : nullptr;
        inside[d] = ok && (!st->tops.empty() || st->complete); /* complete: the stack was known to its end, and the text is a sentence */
        escaped[d] = escaped[d - 1] || (ok && st->escaped);
        if (!inside[d] && !escaped[d]) {
            i = trie.skip[i];
            continue;
        }
        if (!inside[d] && trie.tokens_begin[i] < trie.tokens_begin[i + 1]) out->uncertain.push_back((uint32_t)i);
        /* inside a string's body, a subtree of plain bytes is accepted whole (a clipped context
           judges no token past GPT2__CLIP_BYTES) */
        const bool whole = inside[d] && !out->clipped && trie.skip[i] > i + 1 && trie.plain_below[i] && gpt2__loops_on_plain(&mk, &loops, mk.levels[d]);
        const size_t next = whole ? trie.skip[i] : i + 1;
        for (uint32_t k = trie.tokens_begin[i]; inside[d] && k < trie.tokens_begin[next]; k++) {
            const int32_t token = trie.tokens[k];
            out->accepted[token >> 5] |= 1u << (token & 31);
        }
        i = next;
    }
}

/* Keeps only the nonzero words of `accepted` where they are fewer than half, and returns the
   bytes the context holds. */
static size_t gpt2__context_tokens_compact(gpt2__context_tokens* c) {
    size_t nonzero = 0;
    for (uint32_t word : c->accepted) nonzero += word != 0;
    if (nonzero * 2 < c->accepted.size()) {
        gpt2__vector<uint32_t> bits, at;
        bits.reserve(nonzero);
        at.reserve(nonzero);
        for (size_t w = 0; w < c->accepted.size(); w++)
            if (c->accepted[w]) bits.push_back(c->accepted[w]), at.push_back((uint32_t)w);
        c->accepted = std::move(bits);
        c->accepted_at = std::move(at);
    }
    c->uncertain.shrink_to_fit();
    return sizeof *c + (c->context.capacity() + c->accepted.capacity() + c->accepted_at.capacity() + c->uncertain.capacity()) * sizeof(uint32_t);
}

/* Sets the bits of the tokens context `c` accepts. */
static void gpt2__context_tokens_add(const gpt2__context_tokens& c, uint32_t* allowed) {
    if (c.accepted_at.empty())
        for (size_t w = 0; w < c.accepted.size(); w++) allowed[w] |= c.accepted[w];
    else
        for (size_t k = 0; k < c.accepted_at.size(); k++) allowed[c.accepted_at[k]] |= c.accepted[k];
}

/* The tokens decided by the context of stack `top` (its first GPT2__CONTEXT_DEPTH positions),
   made on first use; NULL when the grammar holds as many contexts, or bytes of them, as it may. */
static const gpt2__context_tokens* gpt2__context_tokens_find(const gpt2_grammar* g, const gpt2__gss& gss, uint32_t top) {
    uint32_t context[GPT2__CONTEXT_DEPTH];
    size_t n = 0;
    bool clipped = false;
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint32_t id = top; id && n < GPT2__CONTEXT_DEPTH; id = gss.nodes[id].parent) {
        const uint32_t pos = gss.nodes[id].pos, stands_for = g->stands_for[pos];
        clipped = clipped || stands_for != UINT32_MAX;
        context[n++] = stands_for != UINT32_MAX ? stands_for : pos;
        h = (h ^ context[n - 1]) * 0x100000001b3ull;
    }
    h ^= clipped;
    std::lock_guard<std::mutex> lock(g->contexts_mutex);
    const auto found = g->context_index.equal_range(h);
    for (auto it = found.first; it != found.second; ++it) {
        const gpt2__context_tokens& p = g->contexts[it->second];
        if (p.clipped == clipped && p.context.size() == n && std::equal(context, context + n, p.context.begin())) return &p;
    }
    if (g->contexts.size() >= GPT2__MAX_CONTEXTS || g->contexts_bytes >= GPT2__CONTEXTS_MAX_BYTES) return nullptr;
    g->context_index.emplace(h, (uint32_t)g->contexts.size());
    g->contexts.emplace_back();
    gpt2__context_tokens* made = &g->contexts.back();
    made->context.assign(context, context + n);
    made->clipped = clipped;
    gpt2__context_maker* maker = gpt2__context_maker_of(g);
    if (maker) gpt2__context_tokens_make(g, maker, made);
    else gpt2__context_tokens_undecided(g->model->token_trie, made); /* out of memory */
    g->contexts_bytes += gpt2__context_tokens_compact(made);
    return made;
}

/* Walks trie node `entry` (a gpt2__context_tokens::uncertain entry) from the state: the path to
   it first, then its tokens, or its whole subtree's. */
static gpt2_result gpt2__matcher_walk_entry(gpt2__grammar_matcher* m, uint32_t entry, uint32_t* allowed, gpt2_error* err) {
    const gpt2__token_trie& trie = m->g->model->token_trie;
    const size_t node = entry & ~GPT2__WHOLE_SUBTREE, d = trie.depth[node];
    const std::string_view path = gpt2__tokenizer_token_bytes(&m->g->model->tokenizer, trie.tokens[trie.tokens_begin[node]]);
    const size_t end = entry & GPT2__WHOLE_SUBTREE ? trie.skip[node] : node + 1;
    for (size_t k = 1; k < (entry & GPT2__WHOLE_SUBTREE ? d : d + 1); k++)
        if (!gpt2__walk_step(m, m->levels[k - 1], (uint8_t)path[k - 1], &m->levels[k]))
            return m->gss.overflow ? gpt2__matcher_overflow(err) : GPT2_OK;
    if (!(entry & GPT2__WHOLE_SUBTREE)) {
        for (uint32_t k = trie.tokens_begin[node]; k < trie.tokens_begin[node + 1]; k++) allowed[trie.tokens[k] >> 5] |= 1u << (trie.tokens[k] & 31);
        return GPT2_OK;
    }
    return gpt2__matcher_walk(m, node, end, allowed, err);
}

/* Sets bit t of `allowed` (n_vocab bits) for every token t whose bytes keep the text a prefix
   of a sentence, and the end-of-text token's when the text is complete: the tokens each top's
   position accepts alone, and those of its uncertain ones that a walk from the state allows (a
   state inside a UTF-8 character walks the whole trie). */
static gpt2_result gpt2__matcher_mask(gpt2__grammar_matcher* m, uint32_t* allowed, gpt2_error* err) {
    const gpt2_grammar& g = *m->g;
    const gpt2_model& model = *g.model;
    const size_t words = ((size_t)model.n_vocab + 31) / 32;
    gpt2__state_table& t = m->table;
    if (t.states.size() >= GPT2__STATE_TABLE_SIZE) gpt2__state_table_clear(&t);
    m->levels.resize((size_t)model.token_trie.max_depth + 1);
    gpt2__walk_level& root = m->levels[0];
    root.id = gpt2__state_table_id(&t, m->state);
    root.state = m->state;
    if (root.id >= 0 && t.mask_slot[(size_t)root.id] >= 0) {
        std::memcpy(allowed, t.masks.data() + (size_t)t.mask_slot[(size_t)root.id] * words, words * sizeof(uint32_t));
        return GPT2_OK;
    }
    std::memset(allowed, 0, words * sizeof(uint32_t));
    if (m->gss.overflow) return gpt2__matcher_overflow(err); /* already at the start */
    gpt2__vector<const gpt2__context_tokens*>& decided = m->decided;
    decided.clear();
    for (size_t k = 0; m->state.need == 0 && k < m->state.tops.size(); k++) {
        const gpt2__context_tokens* p = gpt2__context_tokens_find(&g, m->gss, m->state.tops[k]);
        if (!p) break;
        decided.push_back(p);
    }
    if (decided.size() < m->state.tops.size()) { /* inside a UTF-8 character, or no room for more contexts */
        GPT2__TRY(gpt2__matcher_walk(m, 0, model.token_trie.byte.size(), allowed, err));
    } else {
        std::sort(decided.begin(), decided.end());
        decided.erase(std::unique(decided.begin(), decided.end()), decided.end());
        for (const gpt2__context_tokens* p : decided) gpt2__context_tokens_add(*p, allowed);
        m->entries.clear();
        for (const gpt2__context_tokens* p : decided) m->entries.insert(m->entries.end(), p->uncertain.begin(), p->uncertain.end());
        std::sort(m->entries.begin(), m->entries.end());
        m->entries.erase(std::unique(m->entries.begin(), m->entries.end()), m->entries.end());
        for (uint32_t entry : m->entries) GPT2__TRY(gpt2__matcher_walk_entry(m, entry, allowed, err));
    }
    const int32_t eos = model.tokenizer.eos;
    if (eos >= 0 && eos < model.n_vocab && m->state.complete && m->state.need == 0) allowed[eos >> 5] |= 1u << (eos & 31);
    if (root.id >= 0 && t.n_masks < GPT2__MASK_CACHE_SIZE) {
        t.mask_slot[(size_t)root.id] = t.n_masks++;
        t.masks.insert(t.masks.end(), allowed, allowed + words);
    }
    return GPT2_OK;
}

/* The text the grammar allows alone after the state, up to `limit` bytes: while the text is not
   a sentence and every stack's top holds one and the same code point, that code point comes next
   (`"action": "` in a template). *finishes: the text then ends a sentence nothing may extend. */
static void gpt2__matcher_forced_text(gpt2__grammar_matcher* m, size_t limit, gpt2__string* out, bool* finishes) {
    out->clear();
    gpt2__gstate st = m->state;
    for (;;) {
        *finishes = st.complete && st.tops.empty();
        if (st.complete || st.escaped || st.need != 0 || st.tops.empty()) return;
        uint32_t cp = UINT32_MAX;
        for (uint32_t id : st.tops) {
            const gpt2__code_points& c = m->g->classes[m->g->elems[m->gss.nodes[id].pos].value];
            if (c.ranges.size() != 1 || c.ranges[0].first != c.ranges[0].second || (cp != UINT32_MAX && cp != c.ranges[0].first)) return;
            cp = c.ranges[0].first;
        }
        char bytes[4];
        const size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        if (out->size() + n > limit) return;
        static const uint8_t lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0}; /* UTF-8's first byte, by length */
        bytes[0] = (char)(lead[n] | (cp >> (6 * (n - 1))));
        for (size_t k = 1; k < n; k++) bytes[k] = (char)(0x80u | ((cp >> (6 * (n - 1 - k))) & 0x3Fu));
        for (size_t k = 0; k < n; k++) {
            if (!gpt2__gstate_advance_byte(&m->gss, st, (uint8_t)bytes[k], &m->next)) return; /* only when too ambiguous: the mask reports it */
            std::swap(st, m->next);
        }
        out->append(bytes, n);
    }
}

/* gpt2_grammar_match's answer for `text`. */
static gpt2_result gpt2__grammar_match_text(const gpt2_grammar* g, std::string_view text, gpt2_match* match, gpt2_error* err) {
    gpt2__grammar_matcher m;
    gpt2__matcher_begin(&m, g);
    if (m.gss.overflow) return gpt2__matcher_overflow(err);
    bool alive;
    GPT2__TRY(gpt2__matcher_feed(&m, text, &alive, err));
    *match = !alive ? GPT2_MATCH_NONE : m.state.complete && m.state.need == 0 ? GPT2_MATCH_COMPLETE : GPT2_MATCH_PREFIX;
    return GPT2_OK;
}

#endif /* GPT2__PART_GRAMMAR_MATCHER_H */
