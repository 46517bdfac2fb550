#ifndef GPT2__PART_GRAMMAR_GBNF_H
#define GPT2__PART_GRAMMAR_GBNF_H
#include "../model/model.h"

/* Grammars in llama.cpp's GBNF, made into the form the matcher (matcher.h) walks: every rule a
   list of alternatives, every alternative a sequence of elements - a character class (a set of
   code points), a reference to a rule, and an end. A literal is a sequence of one-character
   classes; a group, `x*`, `x+`, `x?` and `x{m,n}` become rules of their own, as llama.cpp
   makes them (x* is r ::= x r | empty), named after the rule they are written in ("value_2"),
   so that an error can name them. */

enum gpt2__gkind : uint8_t { GPT2__G_END, GPT2__G_CHARS, GPT2__G_RULE };

struct gpt2__gelem {
    gpt2__gkind kind;
    uint32_t value; /* CHARS: an index into gpt2_grammar::classes; RULE: a rule's index */
};

/* A set of code points: sorted, disjoint, inclusive ranges, and the ASCII ones as bits too
   (most text a grammar checks is ASCII). */
struct gpt2__code_points {
    uint64_t ascii[2] = {0, 0};
    gpt2__vector<std::pair<uint32_t, uint32_t>> ranges;
};

static bool gpt2__class_has(const gpt2__code_points& c, uint32_t cp) {
    if (cp < 128) return (c.ascii[cp >> 6] >> (cp & 63)) & 1;
    auto it = std::upper_bound(c.ranges.begin(), c.ranges.end(), std::make_pair(cp, UINT32_MAX));
    return it != c.ranges.begin() && std::prev(it)->second >= cp;
}

/* Whether the class holds any code point of [lo, hi]. */
static bool gpt2__class_meets(const gpt2__code_points& c, uint32_t lo, uint32_t hi) {
    auto it = std::upper_bound(c.ranges.begin(), c.ranges.end(), std::make_pair(hi, UINT32_MAX));
    return it != c.ranges.begin() && std::prev(it)->second >= lo;
}

struct gpt2__grule {
    gpt2__string name;
    uint32_t alts_begin = 0, alts_end = 0; /* its alternatives: gpt2_grammar::alt_starts[begin, end) */
};

/* What a stack's top decides about the vocabulary, given the positions of the stack's first
   GPT2__CONTEXT_DEPTH nodes, `context` (from the top down; below them the stack is unknown, or
   empty when there are fewer). Made by matcher.h on first use: `accepted`, a bit per token, the
   tokens read whole inside the context; `uncertain`, the nodes of the vocabulary's trie whose
   tokens reach past it, where the stack below decides (a node, or with GPT2__WHOLE_SUBTREE its
   whole subtree). The deeper the context, the fewer tokens are left to the stack below (at depth
   1, every token longer than one character of JSON's `char` rule) and the more contexts a
   grammar makes. */
enum : uint32_t { GPT2__WHOLE_SUBTREE = 1u << 31 };
/* A grammar keeps contexts up to both limits (a schema of hundreds of optional properties makes
   a context per character of every key it meets: tens of thousands); past them a mask walks the
   whole trie from the state. */
enum { GPT2__CONTEXT_DEPTH = 4, GPT2__MAX_CONTEXTS = 1 << 16, GPT2__CONTEXTS_MAX_BYTES = 32 << 20, GPT2__CLIP_BYTES = 16 };
struct gpt2__context_tokens {
    gpt2__vector<uint32_t> context;
    bool clipped = false; /* some position stood for a farther copy of a repetition (gpt2_grammar::stands_for) */
    /* every word of the bitmap; or, where most words are 0 (a position in a key's literal accepts a
       handful of tokens), only the others: word accepted_at[k] of the bitmap is accepted[k] */
    gpt2__vector<uint32_t> accepted;
    gpt2__vector<uint32_t> accepted_at;
    gpt2__vector<uint32_t> uncertain;
};

struct gpt2__context_maker;

struct gpt2_grammar {
    const gpt2_model* model = nullptr; /* held (gpt2_model::n_refs) until the grammar is freed */
    gpt2__vector<gpt2__gelem> elems; /* every alternative's elements, each ending with GPT2__G_END */
    gpt2__vector<uint32_t> alt_starts;
    gpt2__vector<gpt2__grule> rules;
    gpt2__vector<gpt2__code_points> classes;
    uint32_t root = 0;
    gpt2__tag tag{GPT2__TAG_GRAMMAR}; /* GPT2__TAG_FREED once freed (src/common.h) */
    /* per element: UINT32_MAX, or in a copy of a repetition x{m,n} more than GPT2__CLIP_BYTES
       copies from the end, the same element in the copy that many from the end, where x is a
       character class or a rule that cannot match the empty text. A token of at most that many
       bytes cannot tell them apart (each copy reads a character at least), so their contexts
       share the tokens they decide, and the longer tokens are left to the walk from the state:
       [^\n]{1,120}, or a JSON string's char{0,500} (maxLength), would otherwise make a context for
       every character. */
    gpt2__vector<uint32_t> stands_for;
    /* the contexts met so far (at most GPT2__MAX_CONTEXTS, holding GPT2__CONTEXTS_MAX_BYTES),
       under the mutex: grammars are shared; a deque keeps them where they are while more are added */
    mutable std::mutex contexts_mutex;
    mutable std::deque<gpt2__context_tokens, gpt2__allocator<gpt2__context_tokens>> contexts;
    mutable size_t contexts_bytes = 0;
    mutable gpt2__context_maker* context_maker = nullptr; /* the scratch of making them, kept between them (matcher.h) */
    mutable std::unordered_multimap<uint64_t, uint32_t, std::hash<uint64_t>, std::equal_to<uint64_t>, gpt2__allocator<std::pair<const uint64_t, uint32_t>>> context_index;
};

enum { GPT2__GRAMMAR_MAX_ELEMS = 1 << 20, GPT2__GRAMMAR_MAX_REPEAT = 1 << 16 };

/* The parser: recursive descent over the text, one rule at a time. Rules are built as nested
   vectors (a group's rule is made while its parent's alternative is open), then laid flat. */
struct gpt2__gbnf_parser {
    const char* text = nullptr;
    size_t n = 0, pos = 0;
    gpt2_error* err = nullptr;
    gpt2__vector<gpt2__vector<gpt2__vector<gpt2__gelem>>> alts; /* per rule */
    gpt2__vector<gpt2__string> names;
    std::unordered_map<std::string_view, uint32_t> written; /* the rules the text names (views into it), by name */
    gpt2__vector<size_t> defined_at, used_at; /* text offsets; SIZE_MAX = not yet */
    gpt2__vector<uint32_t> n_children;        /* groups and repetitions made inside each rule */
    gpt2__vector<uint32_t> stands_for;        /* per rule: see gpt2_grammar::stands_for */
    gpt2__vector<gpt2__code_points> classes;
    size_t n_elems = 0;
};

/* "line 3, column 14" of a text offset (columns count bytes, from 1). */
static void gpt2__gbnf_where(const gpt2__gbnf_parser& ps, size_t at, int* line, int* column) {
    *line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < at && i < ps.n; i++)
        if (ps.text[i] == '\n') {
            (*line)++;
            line_start = i + 1;
        }
    *column = (int)(at - line_start) + 1;
}

/* A syntax error at `at`: "line L, column C: <what>". */
static gpt2_result gpt2__gbnf_fail(const gpt2__gbnf_parser& ps, size_t at, const char* fmt, ...) GPT2__PRINTF_LIKE(3, 4);
static gpt2_result gpt2__gbnf_fail(const gpt2__gbnf_parser& ps, size_t at, const char* fmt, ...) {
    char what[400];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(what, sizeof what, fmt, args);
    va_end(args);
    int line, column;
    gpt2__gbnf_where(ps, at, &line, &column);
    return gpt2__fail(ps.err, GPT2_ERROR_BAD_GRAMMAR, "grammar, line %d, column %d: %s", line, column, what);
}

/* What is at the parser's position, for "found ..." in messages. */
static const char* gpt2__gbnf_found(const gpt2__gbnf_parser& ps, char* buf, size_t size) {
    if (ps.pos >= ps.n) return "the end of the grammar";
    const unsigned char c = (unsigned char)ps.text[ps.pos];
    if (c == '\n') return "the end of the line";
    if (c >= 0x20 && c < 0x7F) std::snprintf(buf, size, "'%c'", c);
    else std::snprintf(buf, size, "byte 0x%02X", c);
    return buf;
}

static bool gpt2__gbnf_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Spaces, newlines and # comments. A rule ends where the next `name ::=` begins, so newlines
   need no special meaning (llama.cpp allows them only inside groups and after ::= and |; every
   grammar it reads reads the same here). */
static size_t gpt2__gbnf_after_space(const gpt2__gbnf_parser& ps, size_t pos) {
    while (pos < ps.n) {
        const char c = ps.text[pos];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') pos++;
        else if (c == '#')
            while (pos < ps.n && ps.text[pos] != '\n') pos++;
        else break;
    }
    return pos;
}

static void gpt2__gbnf_skip_space(gpt2__gbnf_parser* ps) { ps->pos = gpt2__gbnf_after_space(*ps, ps->pos); }

static std::string_view gpt2__gbnf_name_at(const gpt2__gbnf_parser& ps, size_t at) {
    size_t end = at;
    while (end < ps.n && gpt2__gbnf_name_char(ps.text[end])) end++;
    return std::string_view(ps.text + at, end - at);
}

/* Whether a rule's definition (`name ::=`) starts at `at`. */
static bool gpt2__gbnf_definition_at(const gpt2__gbnf_parser& ps, size_t at) {
    const size_t name_end = at + gpt2__gbnf_name_at(ps, at).size();
    if (name_end == at) return false;
    const size_t next = gpt2__gbnf_after_space(ps, name_end);
    return ps.n - next >= 3 && std::memcmp(ps.text + next, "::=", 3) == 0;
}

static uint32_t gpt2__gbnf_new_rule(gpt2__gbnf_parser* ps, std::string_view name) {
    ps->alts.emplace_back();
    ps->names.emplace_back(name);
    ps->defined_at.push_back(SIZE_MAX);
    ps->used_at.push_back(SIZE_MAX);
    ps->n_children.push_back(0);
    ps->stands_for.push_back(UINT32_MAX);
    return (uint32_t)(ps->alts.size() - 1);
}

/* A rule of its own for a group or a repetition inside `parent`: "parent_1", "parent_2", ... */
static uint32_t gpt2__gbnf_child_rule(gpt2__gbnf_parser* ps, uint32_t parent, size_t at) {
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "_%u", (unsigned)++ps->n_children[parent]);
    gpt2__string name = ps->names[parent];
    name += suffix;
    const uint32_t id = gpt2__gbnf_new_rule(ps, name);
    ps->defined_at[id] = at;
    return id;
}

/* The rule the text calls `name` (a view into the text, which outlives the parser), made at its
   first mention. Rules made for groups and repetitions are not looked up by name: a rule the
   text calls "value_2" is its own, whatever a group of "value" is named. */
static uint32_t gpt2__gbnf_rule_named(gpt2__gbnf_parser* ps, std::string_view name) {
    const auto found = ps->written.find(name);
    if (found != ps->written.end()) return found->second;
    const uint32_t id = gpt2__gbnf_new_rule(ps, name);
    ps->written.emplace(name, id);
    return id;
}

static gpt2_result gpt2__gbnf_hex(gpt2__gbnf_parser* ps, int digits, uint32_t* cp) {
    const size_t at = ps->pos;
    *cp = 0;
    for (int i = 0; i < digits; i++) {
        const char c = ps->pos < ps->n ? ps->text[ps->pos] : 0;
        const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) return gpt2__gbnf_fail(*ps, at, "expected %d hexadecimal digits after \\%c", digits, digits == 2 ? 'x' : digits == 4 ? 'u' : 'U');
        *cp = *cp * 16 + (uint32_t)v;
        ps->pos++;
    }
    if (*cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF))
        return gpt2__gbnf_fail(*ps, at, "U+%X is not a character (a surrogate, or above U+10FFFF)", (unsigned)*cp);
    return GPT2_OK;
}

/* One character of a literal or a class: UTF-8, or an escape. */
static gpt2_result gpt2__gbnf_char(gpt2__gbnf_parser* ps, uint32_t* cp) {
    const size_t at = ps->pos;
    const unsigned char* s = (const unsigned char*)ps->text;
    if (s[at] != '\\') {
        ps->pos += gpt2__utf8_decode(s + at, ps->n - at, cp);
        if (*cp == GPT2__INVALID_CP) return gpt2__gbnf_fail(*ps, at, "byte 0x%02X is not UTF-8 text", s[at]);
        return GPT2_OK;
    }
    if (at + 1 >= ps->n) return gpt2__gbnf_fail(*ps, at, "the grammar ends inside an escape");
    ps->pos += 2;
    switch (s[at + 1]) {
    case 'x': return gpt2__gbnf_hex(ps, 2, cp);
    case 'u': return gpt2__gbnf_hex(ps, 4, cp);
    case 'U': return gpt2__gbnf_hex(ps, 8, cp);
    case 'n': *cp = '\n'; return GPT2_OK;
    case 'r': *cp = '\r'; return GPT2_OK;
    case 't': *cp = '\t'; return GPT2_OK;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': *cp = s[at + 1]; return GPT2_OK;
    }
    const unsigned char c = s[at + 1];
    if (c >= 0x20 && c < 0x7F)
        return gpt2__gbnf_fail(*ps, at, "invalid escape \\%c; expected one of \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\^ \\xHH \\uHHHH \\UHHHHHHHH", c);
    return gpt2__gbnf_fail(*ps, at, "invalid escape: byte 0x%02X after the backslash", c);
}

/* Adds a class made of `ranges` (any order, may overlap; `negated`: every other code point). */
static gpt2_result gpt2__gbnf_add_class(gpt2__gbnf_parser* ps, gpt2__vector<std::pair<uint32_t, uint32_t>> ranges, bool negated, size_t at,
                                        gpt2__gelem* out) {
    std::sort(ranges.begin(), ranges.end());
    gpt2__code_points c;
    for (const auto& r : ranges)
        if (!c.ranges.empty() && r.first <= c.ranges.back().second + 1) c.ranges.back().second = std::max(c.ranges.back().second, r.second);
        else c.ranges.push_back(r);
    if (negated) {
        gpt2__vector<std::pair<uint32_t, uint32_t>> rest;
        uint32_t next = 0;
        for (const auto& r : c.ranges) {
            if (r.first > next) rest.push_back({next, r.first - 1});
            next = r.second + 1;
        }
        if (next <= 0x10FFFF) rest.push_back({next, 0x10FFFF});
        c.ranges = rest;
    }
    if (c.ranges.empty()) return gpt2__gbnf_fail(*ps, at, "this character class matches no character");
    for (const auto& r : c.ranges)
        for (uint32_t cp = r.first; cp <= std::min<uint32_t>(r.second, 127); cp++) c.ascii[cp >> 6] |= 1ull << (cp & 63);
    ps->classes.push_back(std::move(c));
    *out = {GPT2__G_CHARS, (uint32_t)(ps->classes.size() - 1)};
    return GPT2_OK;
}

/* [a-z_] or [^"\\]: after the '['. */
static gpt2_result gpt2__gbnf_class(gpt2__gbnf_parser* ps, gpt2__gelem* out) {
    const size_t at = ps->pos - 1;
    const bool negated = ps->pos < ps->n && ps->text[ps->pos] == '^';
    if (negated) ps->pos++;
    gpt2__vector<std::pair<uint32_t, uint32_t>> ranges;
    for (;;) {
        if (ps->pos >= ps->n) return gpt2__gbnf_fail(*ps, at, "this character class has no closing ']'");
        if (ps->text[ps->pos] == ']') break;
        const size_t item_at = ps->pos;
        uint32_t lo, hi;
        GPT2__TRY(gpt2__gbnf_char(ps, &lo));
        hi = lo;
        if (ps->n - ps->pos >= 2 && ps->text[ps->pos] == '-' && ps->text[ps->pos + 1] != ']') {
            ps->pos++;
            GPT2__TRY(gpt2__gbnf_char(ps, &hi));
            if (hi < lo) return gpt2__gbnf_fail(*ps, item_at, "the range U+%04X-U+%04X runs backwards", (unsigned)lo, (unsigned)hi);
        }
        ranges.push_back({lo, hi});
    }
    ps->pos++;
    if (ranges.empty()) return gpt2__gbnf_fail(*ps, at, "empty character class []");
    return gpt2__gbnf_add_class(ps, std::move(ranges), negated, at, out);
}

static gpt2_result gpt2__gbnf_count_elems(gpt2__gbnf_parser* ps, size_t more, size_t at) {
    ps->n_elems += more;
    if (ps->n_elems > GPT2__GRAMMAR_MAX_ELEMS)
        return gpt2__gbnf_fail(*ps, at, "the grammar grows past %d elements here (repetitions are expanded: x{m,n} is n copies of x)", (int)GPT2__GRAMMAR_MAX_ELEMS);
    return GPT2_OK;
}

static gpt2_result gpt2__gbnf_alternatives(gpt2__gbnf_parser* ps, uint32_t rule);

/* Appends `atom` repeated min to max times (max UINT32_MAX: unbounded) to `seq`. */
static gpt2_result gpt2__gbnf_repeat(gpt2__gbnf_parser* ps, uint32_t rule, gpt2__vector<gpt2__gelem> atom, uint32_t min, uint32_t max, size_t at,
                                     gpt2__vector<gpt2__gelem>* seq) {
    if (atom.size() != 1) { /* a literal of several characters: one rule, so that a repetition is one element */
        const uint32_t wrapped = gpt2__gbnf_child_rule(ps, rule, at);
        ps->alts[wrapped].push_back(atom);
        atom = {{GPT2__G_RULE, wrapped}};
    }
    const gpt2__gelem x = atom[0];
    const size_t optional = max == UINT32_MAX ? 1 : max - min;
    GPT2__TRY(gpt2__gbnf_count_elems(ps, min + 4 * optional + 1, at)); /* each optional copy: a rule of two alternatives, 4 elements */
    for (uint32_t i = 0; i < min; i++) seq->push_back(x);
    if (max == UINT32_MAX) { /* r ::= x r | empty */
        const uint32_t r = gpt2__gbnf_child_rule(ps, rule, at);
        ps->alts[r].push_back({x, {GPT2__G_RULE, r}});
        ps->alts[r].emplace_back();
        seq->push_back({GPT2__G_RULE, r});
        return GPT2_OK;
    }
    /* (x (x (x)?)?)? for max - min = 3: each optional copy only after the one before it */
    gpt2__gelem inner{GPT2__G_END, 0};
    uint32_t clip_copy = UINT32_MAX; /* the copy GPT2__CLIP_BYTES from the end */
    for (size_t i = 0; i < optional; i++) {
        const uint32_t r = gpt2__gbnf_child_rule(ps, rule, at);
        ps->alts[r].push_back({x});
        if (inner.kind == GPT2__G_RULE) ps->alts[r].back().push_back(inner);
        ps->alts[r].emplace_back();
        inner = {GPT2__G_RULE, r};
        if (i + 1 == GPT2__CLIP_BYTES) clip_copy = r;
        if (i + 1 > GPT2__CLIP_BYTES) ps->stands_for[r] = clip_copy; /* kept where x cannot be empty (gpt2__gbnf_parse) */
    }
    if (inner.kind == GPT2__G_RULE) seq->push_back(inner);
    return GPT2_OK;
}

static gpt2_result gpt2__gbnf_number(gpt2__gbnf_parser* ps, uint32_t* value) {
    const size_t at = ps->pos;
    uint64_t v = 0;
    while (ps->pos < ps->n && ps->text[ps->pos] >= '0' && ps->text[ps->pos] <= '9') {
        v = v * 10 + (uint64_t)(ps->text[ps->pos++] - '0');
        if (v > GPT2__GRAMMAR_MAX_REPEAT) return gpt2__gbnf_fail(*ps, at, "a repetition count above %d", (int)GPT2__GRAMMAR_MAX_REPEAT);
    }
    if (ps->pos == at) {
        char buf[16];
        return gpt2__gbnf_fail(*ps, at, "expected a number in {m,n}, found %s", gpt2__gbnf_found(*ps, buf, sizeof buf));
    }
    *value = (uint32_t)v;
    return GPT2_OK;
}

/* {m}, {m,}, {m,n}: after the '{'. */
static gpt2_result gpt2__gbnf_braces(gpt2__gbnf_parser* ps, uint32_t* min, uint32_t* max) {
    char buf[16];
    gpt2__gbnf_skip_space(ps);
    GPT2__TRY(gpt2__gbnf_number(ps, min));
    gpt2__gbnf_skip_space(ps);
    *max = *min;
    if (ps->pos < ps->n && ps->text[ps->pos] == ',') {
        ps->pos++;
        gpt2__gbnf_skip_space(ps);
        *max = UINT32_MAX;
        if (ps->pos < ps->n && ps->text[ps->pos] != '}') {
            const size_t at = ps->pos;
            GPT2__TRY(gpt2__gbnf_number(ps, max));
            if (*max < *min) return gpt2__gbnf_fail(*ps, at, "{%u,%u}: the most is below the least", (unsigned)*min, (unsigned)*max);
            gpt2__gbnf_skip_space(ps);
        }
    }
    if (ps->pos >= ps->n || ps->text[ps->pos] != '}') return gpt2__gbnf_fail(*ps, ps->pos, "expected '}', found %s", gpt2__gbnf_found(*ps, buf, sizeof buf));
    ps->pos++;
    return GPT2_OK;
}

/* One alternative of `rule`: terms until '|', ')', the next rule or the end. */
static gpt2_result gpt2__gbnf_sequence(gpt2__gbnf_parser* ps, uint32_t rule, gpt2__vector<gpt2__gelem>* seq) {
    char buf[16];
    for (;;) {
        gpt2__gbnf_skip_space(ps);
        if (ps->pos >= ps->n) return GPT2_OK;
        const size_t at = ps->pos;
        const char c = ps->text[at];
        if (c == '|' || c == ')' || gpt2__gbnf_definition_at(*ps, at)) return GPT2_OK;
        gpt2__vector<gpt2__gelem> atom;
        if (c == '"') {
            ps->pos++;
            while (ps->pos < ps->n && ps->text[ps->pos] != '"') {
                uint32_t cp;
                GPT2__TRY(gpt2__gbnf_char(ps, &cp));
                gpt2__gelem e;
                GPT2__TRY(gpt2__gbnf_add_class(ps, {{cp, cp}}, false, at, &e));
                atom.push_back(e);
            }
            if (ps->pos >= ps->n) return gpt2__gbnf_fail(*ps, at, "this literal has no closing '\"'");
            ps->pos++;
        } else if (c == '[') {
            ps->pos++;
            gpt2__gelem e;
            GPT2__TRY(gpt2__gbnf_class(ps, &e));
            atom.push_back(e);
        } else if (c == '.') {
            ps->pos++;
            gpt2__gelem e;
            GPT2__TRY(gpt2__gbnf_add_class(ps, {{0, 0x10FFFF}}, false, at, &e));
            atom.push_back(e);
        } else if (c == '(') {
            ps->pos++;
            const uint32_t group = gpt2__gbnf_child_rule(ps, rule, at);
            GPT2__TRY(gpt2__gbnf_alternatives(ps, group));
            if (ps->pos >= ps->n || ps->text[ps->pos] != ')')
                return gpt2__gbnf_fail(*ps, at, "this group has no closing ')'");
            ps->pos++;
            atom.push_back({GPT2__G_RULE, group});
        } else if (gpt2__gbnf_name_char(c)) {
            const std::string_view name = gpt2__gbnf_name_at(*ps, at);
            ps->pos += name.size();
            const uint32_t ref = gpt2__gbnf_rule_named(ps, name);
            if (ps->used_at[ref] == SIZE_MAX) ps->used_at[ref] = at;
            atom.push_back({GPT2__G_RULE, ref});
        } else {
            return gpt2__gbnf_fail(*ps, at, "expected a rule name, a \"literal\", a [class], '.' or '(', found %s", gpt2__gbnf_found(*ps, buf, sizeof buf));
        }
        GPT2__TRY(gpt2__gbnf_count_elems(ps, atom.size(), at));
        const size_t after_atom = ps->pos;
        gpt2__gbnf_skip_space(ps);
        const char op = ps->pos < ps->n ? ps->text[ps->pos] : 0;
        uint32_t min = 1, max = 1;
        if (op == '*' || op == '+' || op == '?' || op == '{') {
            ps->pos++;
            if (op == '*') min = 0, max = UINT32_MAX;
            else if (op == '+') max = UINT32_MAX;
            else if (op == '?') min = 0;
            else GPT2__TRY(gpt2__gbnf_braces(ps, &min, &max));
        } else {
            ps->pos = after_atom;
        }
        if (min == 1 && max == 1) seq->insert(seq->end(), atom.begin(), atom.end());
        else GPT2__TRY(gpt2__gbnf_repeat(ps, rule, std::move(atom), min, max, at, seq));
    }
}

static gpt2_result gpt2__gbnf_alternatives(gpt2__gbnf_parser* ps, uint32_t rule) {
    for (;;) {
        gpt2__vector<gpt2__gelem> seq;
        GPT2__TRY(gpt2__gbnf_sequence(ps, rule, &seq));
        ps->alts[rule].push_back(std::move(seq));
        if (ps->pos >= ps->n || ps->text[ps->pos] != '|') return GPT2_OK;
        ps->pos++;
    }
}

/* Per rule: whether it can match the empty text. */
static gpt2__vector<char> gpt2__gbnf_nullable(const gpt2__gbnf_parser& ps) {
    const size_t R = ps.alts.size();
    gpt2__vector<char> nullable(R, 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < R; r++) {
            if (nullable[r]) continue;
            for (const auto& alt : ps.alts[r]) {
                bool all = true;
                for (const gpt2__gelem& e : alt) all = all && e.kind == GPT2__G_RULE && nullable[e.value];
                if (all) {
                    nullable[r] = changed = true;
                    break;
                }
            }
        }
    }
    return nullable;
}

/* Left recursion: a rule that can reach itself before reading a character. Where the way back
   passes only through references that end their alternatives (tail calls: `r ::= x* r | ""`,
   `( [x]* )*`, whose inner repetition may read nothing), the matcher returns to the same node
   below and meets it again, so it stops (gpt2__gss_closure marks the nodes it met): that
   repetition of an empty iteration is accepted, as llama.cpp accepts it. Where the way back has
   a reference followed by more (`expr ::= expr "+" term`), every turn would push a node and the
   matcher would expand forever: refused, naming the cycle. Found as the strongly connected
   components of "r can begin with s" (Tarjan's, without recursion): a cycle with a reference
   that is not a tail call is an edge of that kind inside one component. */
struct gpt2__gbnf_edge {
    uint32_t to;
    bool tail; /* nothing follows the reference in its alternative */
};

static gpt2_result gpt2__gbnf_check_left_recursion(const gpt2__gbnf_parser& ps, const gpt2__vector<char>& nullable, gpt2_error* err) {
    const size_t R = ps.alts.size();
    gpt2__vector<gpt2__vector<gpt2__gbnf_edge>> edges(R);
    for (size_t r = 0; r < R; r++)
        for (const auto& alt : ps.alts[r])
            for (size_t k = 0; k < alt.size() && alt[k].kind == GPT2__G_RULE; k++) {
                edges[r].push_back({alt[k].value, k + 1 == alt.size()});
                if (!nullable[alt[k].value]) break;
            }
    const uint32_t none = UINT32_MAX;
    gpt2__vector<uint32_t> index(R, none), low(R, 0), component(R, none), stack;
    gpt2__vector<char> on_stack(R, 0);
    gpt2__vector<std::pair<uint32_t, size_t>> path; /* rule, next edge to follow */
    uint32_t next_index = 0, n_components = 0;
    for (uint32_t start = 0; start < R; start++) {
        if (index[start] != none) continue;
        path.push_back({start, 0});
        while (!path.empty()) {
            const uint32_t r = path.back().first;
            if (path.back().second == 0 && index[r] == none) {
                index[r] = low[r] = next_index++;
                stack.push_back(r);
                on_stack[r] = 1;
            }
            if (path.back().second < edges[r].size()) {
                const uint32_t s = edges[r][path.back().second++].to;
                if (index[s] == none) path.push_back({s, 0});
                else if (on_stack[s]) low[r] = std::min(low[r], index[s]);
                continue;
            }
            if (low[r] == index[r]) {
                for (uint32_t s = none; s != r;) {
                    s = stack.back();
                    stack.pop_back();
                    on_stack[s] = 0;
                    component[s] = n_components;
                }
                n_components++;
            }
            path.pop_back();
            if (!path.empty()) low[path.back().first] = std::min(low[path.back().first], low[r]);
        }
    }
    for (uint32_t r = 0; r < R; r++)
        for (const gpt2__gbnf_edge& e : edges[r]) {
            if (e.tail || component[e.to] != component[r]) continue;
            /* the cycle: r, then a shortest way back from e.to to r within the component */
            gpt2__vector<uint32_t> came_from(R, none), queue(1, e.to);
            came_from[e.to] = e.to;
            for (size_t q = 0; q < queue.size() && came_from[r] == none; q++)
                for (const gpt2__gbnf_edge& f : edges[queue[q]])
                    if (component[f.to] == component[r] && came_from[f.to] == none) came_from[f.to] = queue[q], queue.push_back(f.to);
            gpt2__vector<uint32_t> way; /* from r back to e.to */
            for (uint32_t s = r; s != e.to; s = came_from[s]) way.push_back(s);
            gpt2__string cycle = ps.names[r];
            cycle += " -> " + ps.names[e.to];
            for (size_t i = way.size(); i-- > 0;) cycle += " -> " + ps.names[way[i]];
            return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "grammar: rule '%s' is left-recursive (%s); write the repetition as x* or recurse on the right",
                              ps.names[r].c_str(), cycle.c_str());
        }
    return GPT2_OK;
}

/* Parses `text` into *g (its model is set by the caller). root: the start rule's name. */
static gpt2_result gpt2__gbnf_parse(const char* text, size_t n, const char* root, gpt2_grammar* g, gpt2_error* err) {
    gpt2__gbnf_parser ps;
    ps.text = text;
    ps.n = n;
    ps.err = err;
    char buf[16];
    for (gpt2__gbnf_skip_space(&ps); ps.pos < ps.n; gpt2__gbnf_skip_space(&ps)) {
        const size_t at = ps.pos;
        const std::string_view name = gpt2__gbnf_name_at(ps, at);
        if (name.empty()) return gpt2__gbnf_fail(ps, at, "expected a rule name, found %s", gpt2__gbnf_found(ps, buf, sizeof buf));
        ps.pos += name.size();
        gpt2__gbnf_skip_space(&ps);
        if (ps.n - ps.pos < 3 || std::memcmp(ps.text + ps.pos, "::=", 3) != 0)
            return gpt2__gbnf_fail(ps, ps.pos, "expected '::=' after the rule name '%.*s', found %s", (int)name.size(), name.data(), gpt2__gbnf_found(ps, buf, sizeof buf));
        ps.pos += 3;
        const uint32_t rule = gpt2__gbnf_rule_named(&ps, name);
        if (ps.defined_at[rule] != SIZE_MAX) {
            int line, column;
            gpt2__gbnf_where(ps, ps.defined_at[rule], &line, &column);
            return gpt2__gbnf_fail(ps, at, "rule '%.*s' is defined twice (first at line %d)", (int)name.size(), name.data(), line);
        }
        ps.defined_at[rule] = at;
        GPT2__TRY(gpt2__gbnf_alternatives(&ps, rule));
        if (ps.pos < ps.n && !gpt2__gbnf_definition_at(ps, ps.pos))
            return gpt2__gbnf_fail(ps, ps.pos, "unexpected %s", gpt2__gbnf_found(ps, buf, sizeof buf));
    }
    if (ps.alts.empty()) return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "grammar: no rules (expected `root ::= ...`)");
    for (size_t r = 0; r < ps.alts.size(); r++)
        if (ps.defined_at[r] == SIZE_MAX) return gpt2__gbnf_fail(ps, ps.used_at[r], "rule '%s' is used but never defined", ps.names[r].c_str());
    const char* root_name = root ? root : "root";
    const auto root_rule = ps.written.find(root_name);
    if (root_rule == ps.written.end())
        return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "grammar: no rule named '%s', the start rule%s", root_name, root ? "" : " (root = NULL means \"root\")");
    const gpt2__vector<char> nullable = gpt2__gbnf_nullable(ps);
    GPT2__TRY(gpt2__gbnf_check_left_recursion(ps, nullable, err));
    g->classes = std::move(ps.classes);
    g->root = root_rule->second;
    g->rules.resize(ps.alts.size());
    for (size_t r = 0; r < ps.alts.size(); r++) {
        g->rules[r].name = ps.names[r];
        g->rules[r].alts_begin = (uint32_t)g->alt_starts.size();
        for (const auto& alt : ps.alts[r]) {
            g->alt_starts.push_back((uint32_t)g->elems.size());
            g->elems.insert(g->elems.end(), alt.begin(), alt.end());
            g->elems.push_back({GPT2__G_END, 0});
        }
        g->rules[r].alts_end = (uint32_t)g->alt_starts.size();
    }
    g->stands_for.assign(g->elems.size(), UINT32_MAX);
    for (size_t r = 0; r < ps.alts.size(); r++) { /* a copy and the one it stands for have the same alternatives, element for element */
        if (ps.stands_for[r] == UINT32_MAX) continue;
        const gpt2__gelem x = ps.alts[r][0][0]; /* what the copy repeats */
        if (x.kind == GPT2__G_RULE && nullable[x.value]) continue;
        for (uint32_t a = 0; a < g->rules[r].alts_end - g->rules[r].alts_begin; a++)
            for (uint32_t e = g->alt_starts[g->rules[r].alts_begin + a], k = 0; g->elems[e].kind != GPT2__G_END; e++, k++)
                g->stands_for[e] = g->alt_starts[g->rules[ps.stands_for[r]].alts_begin + a] + k;
    }
    return GPT2_OK;
}

/* A code point for a message: 'c' when printable ASCII, else U+XXXX. */
static gpt2__string gpt2__code_point_text(uint32_t cp) {
    char buf[16];
    if (cp >= 0x20 && cp < 0x7F) std::snprintf(buf, sizeof buf, "'%c'", (char)cp);
    else std::snprintf(buf, sizeof buf, "U+%04X", (unsigned)cp);
    return buf;
}

/* A character class for a message: the one code point, or its ranges in brackets. */
static gpt2__string gpt2__class_text(const gpt2__code_points& c) {
    if (c.ranges.size() == 1 && c.ranges[0].first == c.ranges[0].second) return gpt2__code_point_text(c.ranges[0].first);
    gpt2__string text = "[";
    for (const auto& r : c.ranges) {
        if (text.size() > 40) return text + "...]";
        text += gpt2__code_point_text(r.first);
        if (r.second != r.first) text += "-" + gpt2__code_point_text(r.second);
        text += r.first == c.ranges.back().first ? "" : " ";
    }
    return text + "]";
}

/* Whether some finite text of the writable classes matches the start rule (class_writable: a
   flag per class; NULL, every class). The rules that can produce one are found as a fixed point.
   A $ref cycle with no way out ({"properties": {"a": {"$ref": "#"}}, "required": ["a"]}) makes a
   grammar nothing completes. */
static bool gpt2__grammar_root_productive(const gpt2_grammar& g, const gpt2__vector<char>* class_writable) {
    gpt2__vector<char> productive(g.rules.size(), 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < g.rules.size(); r++) {
            for (uint32_t a = g.rules[r].alts_begin; a < g.rules[r].alts_end && !productive[r]; a++) {
                bool all = true;
                for (uint32_t e = g.alt_starts[a]; all && g.elems[e].kind != GPT2__G_END; e++)
                    all = g.elems[e].kind == GPT2__G_RULE ? productive[g.elems[e].value] != 0 : !class_writable || (*class_writable)[g.elems[e].value];
                if (all) productive[r] = changed = true;
            }
        }
    }
    return productive[g.root] != 0;
}

/* A grammar whose every sentence needs a character no token holds (a JSON Schema's '{' for a
   model trained on plays, whose vocabulary has no braces) would let generation run until the
   mask is empty, and fail there; it is refused when it is made instead ("what: ..."), naming the
   characters no token holds among those the start rule reaches. A character counts as writable
   when some token holds it: a vocabulary of every byte (GPT-2's) writes everything. A grammar
   with no finite sentence at all (root ::= "a" root) is not the vocabulary's doing: it passes. */
static gpt2_result gpt2__grammar_check_writable(const gpt2_grammar& g, const gpt2__tokenizer& tok, const char* what, gpt2_error* err) {
    bool every_byte = true;
    for (int32_t id : tok.byte_id) every_byte = every_byte && id >= 0;
    if (every_byte) return GPT2_OK;
    gpt2__vector<uint32_t> writable; /* the code points the tokens hold */
    for (size_t i = 0; i + 1 < tok.offsets.size(); i++)
        for (size_t at = tok.offsets[i], end = tok.offsets[i + 1]; at < end;) {
            uint32_t cp;
            at += gpt2__utf8_decode((const unsigned char*)tok.bytes.data() + at, end - at, &cp);
            if (cp != GPT2__INVALID_CP) writable.push_back(cp);
        }
    gpt2__vector<char> class_writable(g.classes.size(), 0);
    for (size_t c = 0; c < g.classes.size(); c++)
        for (size_t i = 0; i < writable.size() && !class_writable[c]; i++) class_writable[c] = gpt2__class_has(g.classes[c], writable[i]);
    if (gpt2__grammar_root_productive(g, &class_writable) || !gpt2__grammar_root_productive(g, nullptr)) return GPT2_OK;
    gpt2__vector<char> reached(g.rules.size(), 0);
    gpt2__vector<uint32_t> queue(1, g.root);
    reached[g.root] = 1;
    gpt2__vector<gpt2__string> lacking;
    for (size_t q = 0; q < queue.size(); q++)
        for (uint32_t a = g.rules[queue[q]].alts_begin; a < g.rules[queue[q]].alts_end; a++)
            for (uint32_t e = g.alt_starts[a]; g.elems[e].kind != GPT2__G_END; e++) {
                const uint32_t v = g.elems[e].value;
                if (g.elems[e].kind == GPT2__G_RULE) {
                    if (!reached[v]) reached[v] = 1, queue.push_back(v);
                } else if (!class_writable[v]) {
                    const gpt2__string text = gpt2__class_text(g.classes[v]);
                    if (std::find(lacking.begin(), lacking.end(), text) == lacking.end()) lacking.push_back(text);
                }
            }
    gpt2__string named;
    for (size_t i = 0; i < lacking.size() && i < 4; i++) named += (i ? ", " : "") + lacking[i];
    return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "%s: this model's vocabulary cannot write any text the %s accepts: no token holds %s%s", what,
                      what, named.c_str(), lacking.size() > 4 ? ", ..." : "");
}

#endif /* GPT2__PART_GRAMMAR_GBNF_H */
