#ifndef GPT2__PART_GRAMMAR_JSON_SCHEMA_H
#define GPT2__PART_GRAMMAR_JSON_SCHEMA_H
#include "gbnf.h"
#include "regex.h"

/* JSON Schema to a grammar: a strict JSON reader, then a converter that writes GBNF text (the
   design of llama.cpp's json_schema_to_grammar) for gbnf.h's parser. A schema is read as a view:
   its keywords and those its allOf parts and $ref targets add (each with where it is written);
   its applicators (anyOf, oneOf, not, if, the dependencies) become unions of views, written with
   complements where a branch must not hold; then each type its keywords allow is an alternative.
   The converter never accepts more than the schema does: a keyword that constrains and is not
   enforced here is refused, naming its JSON pointer; it may accept less (properties in definition
   order unless any_order, extra keys and complements' strings without escapes, numbers of bounds
   without an exponent). tests/test_json_schema_suite.cpp holds it to the JSON-Schema-Test-Suite. */

/* ---- The JSON reader ---------------------------------------------------------------------- */

enum gpt2__json_kind : uint8_t { GPT2__JSON_NULL, GPT2__JSON_BOOL, GPT2__JSON_NUMBER, GPT2__JSON_STRING, GPT2__JSON_ARRAY, GPT2__JSON_OBJECT };

struct gpt2__json {
    gpt2__json_kind kind = GPT2__JSON_NULL;
    bool boolean = false;
    gpt2__string text;                 /* STRING: the decoded UTF-8; NUMBER: the number as written */
    gpt2__vector<gpt2__json> items;    /* ARRAY's items; OBJECT's values */
    gpt2__vector<gpt2__string> keys;   /* OBJECT's keys, in the order written */

    const gpt2__json* get(std::string_view key) const {
        for (size_t i = 0; i < keys.size(); i++)
            if (std::string_view(keys[i]) == key) return &items[i];
        return nullptr;
    }
};

enum { GPT2__JSON_MAX_DEPTH = 256 };

struct gpt2__json_reader {
    const char* s = nullptr;
    size_t n = 0, pos = 0;
    gpt2_error* err = nullptr;
};

/* The code points of UTF-8 text (its bytes that do not continue a character). */
static size_t gpt2__utf8_code_points(std::string_view text) {
    size_t n = 0;
    for (unsigned char c : text) n += (c & 0xC0) != 0x80;
    return n;
}

static gpt2_result gpt2__json_fail(const gpt2__json_reader& r, const char* what) {
    const std::string_view before(r.s, std::min(r.pos, r.n));
    const size_t line_start = before.rfind('\n') + 1; /* npos + 1: the first line */
    const size_t line = 1 + (size_t)std::count(before.begin(), before.end(), '\n'), column = 1 + gpt2__utf8_code_points(before.substr(line_start));
    return gpt2__fail(r.err, GPT2_ERROR_BAD_GRAMMAR, "json schema: malformed JSON at line %zu, column %zu: %s", line, column, what);
}

static void gpt2__json_space(gpt2__json_reader* r) {
    while (r->pos < r->n && (r->s[r->pos] == ' ' || r->s[r->pos] == '\t' || r->s[r->pos] == '\n' || r->s[r->pos] == '\r')) r->pos++;
}

static void gpt2__utf8_append(gpt2__string* out, uint32_t cp) {
    if (cp < 0x80) out->push_back((char)cp);
    else if (cp < 0x800) out->push_back((char)(0xC0 | (cp >> 6))), out->push_back((char)(0x80 | (cp & 0x3F)));
    else if (cp < 0x10000) out->push_back((char)(0xE0 | (cp >> 12))), out->push_back((char)(0x80 | ((cp >> 6) & 0x3F))), out->push_back((char)(0x80 | (cp & 0x3F)));
    else out->push_back((char)(0xF0 | (cp >> 18))), out->push_back((char)(0x80 | ((cp >> 12) & 0x3F))), out->push_back((char)(0x80 | ((cp >> 6) & 0x3F))), out->push_back((char)(0x80 | (cp & 0x3F)));
}

static bool gpt2__json_hex4(gpt2__json_reader* r, uint32_t* v) {
    if (r->n - r->pos < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = r->s[r->pos + i];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        *v = *v * 16 + (uint32_t)d;
    }
    r->pos += 4;
    return true;
}

static gpt2_result gpt2__json_string(gpt2__json_reader* r, gpt2__string* out) {
    r->pos++; /* the opening quote */
    for (;;) {
        if (r->pos >= r->n) return gpt2__json_fail(*r, "unterminated string");
        const unsigned char c = (unsigned char)r->s[r->pos];
        if (c == '"') {
            r->pos++;
            return GPT2_OK;
        }
        if (c < 0x20) return gpt2__json_fail(*r, "a control character in a string (write it escaped)");
        if (c != '\\') {
            /* UTF-8, checked */
            const int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
            if (!len || r->n - r->pos < (size_t)len) return gpt2__json_fail(*r, "bytes that are not UTF-8");
            uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
            for (int i = 1; i < len; i++) {
                const unsigned char b = (unsigned char)r->s[r->pos + i];
                if ((b & 0xC0) != 0x80) return gpt2__json_fail(*r, "bytes that are not UTF-8");
                cp = cp << 6 | (b & 0x3F);
            }
            if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
                return gpt2__json_fail(*r, "bytes that are not UTF-8");
            out->append(r->s + r->pos, (size_t)len);
            r->pos += (size_t)len;
            continue;
        }
        r->pos++;
        if (r->pos >= r->n) return gpt2__json_fail(*r, "unterminated string");
        const char e = r->s[r->pos++];
        switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
            uint32_t cp;
            if (!gpt2__json_hex4(r, &cp)) return gpt2__json_fail(*r, "\\u must be followed by 4 hex digits");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (r->n - r->pos < 6 || r->s[r->pos] != '\\' || r->s[r->pos + 1] != 'u') return gpt2__json_fail(*r, "a lone surrogate \\u escape");
                r->pos += 2;
                if (!gpt2__json_hex4(r, &lo) || lo < 0xDC00 || lo > 0xDFFF) return gpt2__json_fail(*r, "a lone surrogate \\u escape");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                return gpt2__json_fail(*r, "a lone surrogate \\u escape");
            }
            gpt2__utf8_append(out, cp);
            break;
        }
        default: r->pos--; return gpt2__json_fail(*r, "an invalid escape in a string");
        }
    }
}

static gpt2_result gpt2__json_number(gpt2__json_reader* r, gpt2__string* out) {
    const size_t start = r->pos;
    auto digits = [r] {
        size_t k = 0;
        while (r->pos < r->n && r->s[r->pos] >= '0' && r->s[r->pos] <= '9') r->pos++, k++;
        return k;
    };
    if (r->s[r->pos] == '-') r->pos++;
    if (r->pos < r->n && r->s[r->pos] == '0') r->pos++;
    else if (!digits()) return gpt2__json_fail(*r, "a number without digits");
    if (r->pos < r->n && r->s[r->pos] == '.') {
        r->pos++;
        if (!digits()) return gpt2__json_fail(*r, "a number without digits after '.'");
    }
    if (r->pos < r->n && (r->s[r->pos] == 'e' || r->s[r->pos] == 'E')) {
        r->pos++;
        if (r->pos < r->n && (r->s[r->pos] == '+' || r->s[r->pos] == '-')) r->pos++;
        if (!digits()) return gpt2__json_fail(*r, "a number without digits in its exponent");
    }
    out->assign(r->s + start, r->pos - start);
    return GPT2_OK;
}

/* Recursive, with the depth bounded: a document nested deeper is refused before the stack is. */
static gpt2_result gpt2__json_value(gpt2__json_reader* r, gpt2__json* v, int depth) {
    gpt2__json_space(r);
    if (r->pos >= r->n) return gpt2__json_fail(*r, "unexpected end of the text, expected a value");
    const char c = r->s[r->pos];
    auto word = [r](const char* w) {
        const size_t k = std::strlen(w);
        if (r->n - r->pos < k || std::memcmp(r->s + r->pos, w, k) != 0) return false;
        r->pos += k;
        return true;
    };
    if (c == '{' || c == '[') {
        if (depth >= GPT2__JSON_MAX_DEPTH) {
            char what[96];
            std::snprintf(what, sizeof what, "nested deeper than %d arrays and objects", (int)GPT2__JSON_MAX_DEPTH);
            return gpt2__json_fail(*r, what);
        }
        const bool object = c == '{';
        v->kind = object ? GPT2__JSON_OBJECT : GPT2__JSON_ARRAY;
        r->pos++;
        gpt2__json_space(r);
        if (r->pos < r->n && r->s[r->pos] == (object ? '}' : ']')) {
            r->pos++;
            return GPT2_OK;
        }
        for (;;) {
            gpt2__json_space(r);
            if (object) {
                if (r->pos >= r->n || r->s[r->pos] != '"') return gpt2__json_fail(*r, "expected a key (a string in double quotes)");
                gpt2__string key;
                GPT2__TRY(gpt2__json_string(r, &key));
                for (const auto& k : v->keys)
                    if (k == key) return gpt2__json_fail(*r, "a key written twice in one object");
                v->keys.push_back(std::move(key));
                gpt2__json_space(r);
                if (r->pos >= r->n || r->s[r->pos] != ':') return gpt2__json_fail(*r, "expected ':' after the key");
                r->pos++;
            }
            v->items.emplace_back();
            GPT2__TRY(gpt2__json_value(r, &v->items.back(), depth + 1));
            gpt2__json_space(r);
            if (r->pos < r->n && r->s[r->pos] == ',') {
                r->pos++;
                continue;
            }
            if (r->pos < r->n && r->s[r->pos] == (object ? '}' : ']')) {
                r->pos++;
                return GPT2_OK;
            }
            return gpt2__json_fail(*r, object ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    if (c == '"') {
        v->kind = GPT2__JSON_STRING;
        return gpt2__json_string(r, &v->text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->kind = GPT2__JSON_NUMBER;
        return gpt2__json_number(r, &v->text);
    }
    if (word("true") || word("false")) {
        v->kind = GPT2__JSON_BOOL;
        v->boolean = c == 't';
        return GPT2_OK;
    }
    if (word("null")) {
        v->kind = GPT2__JSON_NULL;
        return GPT2_OK;
    }
    return gpt2__json_fail(*r, "expected a value (an object, array, string, number, true, false or null)");
}

static gpt2_result gpt2__json_parse(const char* s, size_t n, gpt2__json* out, gpt2_error* err) {
    gpt2__json_reader r;
    r.s = s;
    r.n = n;
    r.err = err;
    GPT2__TRY(gpt2__json_value(&r, out, 0));
    gpt2__json_space(&r);
    if (r.pos != r.n) return gpt2__json_fail(r, "text after the end of the document");
    return GPT2_OK;
}

/* ---- Schema to GBNF ----------------------------------------------------------------------- */

/* A schema as the converter reads it: its keywords, each with the JSON pointer it was written
   at, so that a schema merged from allOf's parts still names where a keyword came from. */
struct gpt2__schema_kw {
    std::string_view key;
    const gpt2__json* value;
    gpt2__string pointer;              /* of the keyword itself: "/properties/age/minimum" */
    const gpt2__json* owner = nullptr; /* the schema object it is written in: keywords that read each other
                                          (properties and additionalProperties, if and then) read their own */
    uint16_t level = 0;                /* 0: the schema's own keyword; more: merged in from an in-place
                                          applicator (allOf's part, a $ref's target, anyOf's branch) */
    bool evaluates = true;             /* false: a keyword of a complement (inside `not`, a failed `if`),
                                          whose properties and items count as evaluated for no one */
    bool made = false;                 /* written in a schema the converter made (gpt2__schema_converter::made),
                                          not in the document: named inside a made schema by a copy */
};
using gpt2__schema_view = gpt2__vector<gpt2__schema_kw>;

/* The converter's recursion: schemas within schemas, and merges (a few frames a level). */
enum { GPT2__SCHEMA_MAX_DEPTH = 128 };

/* Unions the converter writes for anyOf, oneOf, not, if/then/else and the dependencies, counted
   over the whole schema: past the limit it is refused (each is a copy of the schema around it). */
enum { GPT2__SCHEMA_MAX_BRANCHES = 4096 };

enum : unsigned {
    GPT2__T_NULL = 1, GPT2__T_BOOL = 2, GPT2__T_INTEGER = 4, GPT2__T_NUMBER = 8, GPT2__T_STRING = 16,
    GPT2__T_ARRAY = 32, GPT2__T_OBJECT = 64, GPT2__T_ALL = 127
};

/* Which draft's rules read the schema: its root "$schema" says; without one, where the drafts
   disagree (an $id beside a $ref), the schema is refused. */
enum gpt2__schema_draft : uint8_t { GPT2__DRAFT_UNKNOWN, GPT2__DRAFT_7_OR_OLDER, GPT2__DRAFT_2019_OR_NEWER };

/* A name the document gives a schema: an $id's absolute URI, or one with an anchor's fragment
   ("http://x/a.json#foo"), and where the schema is (a JSON pointer from the document's root). */
struct gpt2__schema_name {
    gpt2__string uri, pointer;
    bool dynamic = false; /* a $dynamicAnchor (also a plain anchor) */
};

struct gpt2__schema_converter {
    const gpt2__json* root = nullptr;
    bool compact = false;
    bool any_order = false;         /* objects' declared properties in any order */
    bool integer_fraction = false;  /* "type": "integer" takes 1.0 (a fraction of zeros) */
    uint32_t max_ws = 20;
    gpt2_error* err = nullptr;
    gpt2__string rules;   /* the GBNF written so far, rule by rule */
    uint32_t next_rule = 0;
    /* $refs: the target's pointer -> its rule; targets still to be written */
    gpt2__vector<std::pair<gpt2__string, gpt2__string>> refs;
    gpt2__vector<std::pair<gpt2__string, const gpt2__json*>> pending;
    gpt2__schema_draft draft = GPT2__DRAFT_UNKNOWN;
    bool draft4 = false; /* draft 4 or 3: "integer" is a number without a fraction or exponent (2.0 is none) */
    gpt2__vector<gpt2__schema_name> names; /* the document's $ids and anchors (gpt2__schema_index) */
    gpt2__string ambiguous_id; /* an $id whose meaning depends on the draft, which the schema does not name */
    /* schemas the converter writes itself (a complement, a branch of a dependency): kept here,
       where they do not move, for as long as the views that point into them */
    std::deque<gpt2__json, gpt2__allocator<gpt2__json>> made;
    size_t branches = 0; /* the unions' branches so far (GPT2__SCHEMA_MAX_BRANCHES) */
    gpt2__string contradiction; /* the first keyword met that leaves no value ("/maxLength: ..."), for the message of a schema nothing matches */
    unsigned used_formats = 0; /* GPT2__FORMAT_ bits: the formats' helper rules to write */
    bool used_string = false, used_value = false, used_number = false, used_integer = false, used_char = false;
};

static gpt2__string gpt2__schema_escape_pointer(std::string_view key) {
    gpt2__string out;
    for (char c : key) {
        if (c == '~') out += "~0";
        else if (c == '/') out += "~1";
        else out.push_back(c);
    }
    return out;
}

static gpt2_result gpt2__schema_refuse(gpt2__schema_converter* cv, std::string_view pointer, const char* why) {
    return gpt2__fail(cv->err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %.*s: %s", (int)pointer.size(), pointer.data(), why);
}

/* Keywords that leave no value of their type (minLength above maxLength): that type, or the
   branch, has none; the first is named where the whole schema has none. */
static gpt2_result gpt2__schema_contradiction(gpt2__schema_converter* cv, std::string_view pointer, const char* why, bool* impossible) {
    if (cv->contradiction.empty()) cv->contradiction = (pointer.empty() ? gpt2__string("(root)") : gpt2__string(pointer)) + ": contradictory bounds: " + why + ", so no value matches the schema";
    *impossible = true;
    return GPT2_OK;
}

/* A keyword the grammar holds only in part, where that part leaves no value here: the type or
   branch is left out (fewer values, never more), and named where the whole schema has none. */
static gpt2_result gpt2__schema_held_in_part(gpt2__schema_converter* cv, std::string_view pointer, const char* why, bool* impossible) {
    if (cv->contradiction.empty()) cv->contradiction = gpt2__string(pointer) + ": " + why + ", so the grammar holds no value of the schema";
    *impossible = true;
    return GPT2_OK;
}

static gpt2__string gpt2__schema_rule_name(gpt2__schema_converter* cv) {
    char name[24];
    std::snprintf(name, sizeof name, "s%u", (unsigned)cv->next_rule++);
    return gpt2__string(name);
}

static gpt2__string gpt2__schema_add_rule(gpt2__schema_converter* cv, std::string_view body) {
    gpt2__string name = gpt2__schema_rule_name(cv);
    cv->rules += name;
    cv->rules += " ::= ";
    cv->rules += body;
    cv->rules += "\n";
    return name;
}

/* Whitespace between tokens: nothing when compact, else a capped run. */
static const char* gpt2__schema_ws(const gpt2__schema_converter* cv) { return cv->compact ? "" : " ws "; }

/* A GBNF literal of UTF-8 text. */
static void gpt2__schema_literal(gpt2__string* out, std::string_view text) {
    out->push_back('"');
    for (unsigned char c : text) {
        char buf[8];
        if (c == '"' || c == '\\') out->push_back('\\'), out->push_back((char)c);
        else if (c < 0x20 || c == 0x7F) std::snprintf(buf, sizeof buf, "\\x%02X", c), out->append(buf);
        else out->push_back((char)c);
    }
    out->push_back('"');
}

/* A number bound, exactly: the sign, the whole part (at most 18 digits) and the fraction's
   digits, trailing zeros dropped ("0.50" and "5e-1" alike). */
struct gpt2__schema_decimal {
    bool negative = false; /* never for zero */
    long long whole = 0;
    gpt2__string fraction;
    bool zero() const { return whole == 0 && fraction.empty(); }
};

/* One end of an interval of magnitudes (gpt2__schema_magnitudes): absent, or a value that the
   end takes in (or, strict, leaves out). */
struct gpt2__schema_end {
    bool present = false, strict = false;
    gpt2__schema_decimal at;
};

/* A number as JSON writes it, with an exponent or not, as a decimal; false when it is not a
   number or is too large or too fine to hold (18 whole digits, 64 fraction digits). */
static bool gpt2__schema_decimal_of(const gpt2__json& j, gpt2__schema_decimal* d) {
    if (j.kind != GPT2__JSON_NUMBER) return false;
    const gpt2__string& t = j.text;
    size_t i = 0;
    const bool negative = i < t.size() && t[i] == '-';
    i += negative;
    gpt2__string digits; /* the mantissa's digits; the point after `point` of them */
    while (i < t.size() && t[i] >= '0' && t[i] <= '9') digits += t[i++];
    long long point = (long long)digits.size();
    if (i < t.size() && t[i] == '.')
        for (i++; i < t.size() && t[i] >= '0' && t[i] <= '9';) digits += t[i++];
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
        i++;
        const bool down = i < t.size() && t[i] == '-';
        if (i < t.size() && (t[i] == '-' || t[i] == '+')) i++;
        long long e = 0;
        for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; i++)
            if ((e = e * 10 + (t[i] - '0')) > 64) return false;
        point += down ? -e : e;
    }
    if (i != t.size() || digits.empty()) return false;
    if (point < 0) digits.insert(0, (size_t)-point, '0'), point = 0;
    if ((long long)digits.size() < point) digits.append((size_t)(point - (long long)digits.size()), '0');
    gpt2__string whole = digits.substr(0, (size_t)point), fraction = digits.substr((size_t)point);
    whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size()));
    fraction.erase(fraction.find_last_not_of('0') + 1);
    if (whole.size() > 18 || fraction.size() > 64) return false;
    d->whole = whole.empty() ? 0 : std::strtoll(whole.c_str(), nullptr, 10);
    d->fraction = fraction;
    d->negative = negative && !d->zero();
    return true;
}

/* Whether x < y, as signed decimals. */
static bool gpt2__schema_decimal_less(const gpt2__schema_decimal& x, const gpt2__schema_decimal& y) {
    if (x.negative != y.negative) return x.negative;
    if (x.whole == y.whole && x.fraction == y.fraction) return false;
    const bool smaller_magnitude = x.whole != y.whole ? x.whole < y.whole : x.fraction < y.fraction; /* digit strings: no trailing zeros */
    return x.negative ? !smaller_magnitude : smaller_magnitude;
}

/* A decimal as JSON writes it most briefly without an exponent: "-12.5", "100", "0". */
static gpt2__string gpt2__schema_decimal_text(const gpt2__schema_decimal& d) {
    gpt2__string text = d.negative ? "-" : "";
    text += std::to_string(d.whole).c_str();
    if (!d.fraction.empty()) text += "." + d.fraction;
    return text;
}

/* A number value of const or enum as GBNF: each way JSON writes it without an exponent (2, 2.0
   and 2.00 are one value, -0 is 0), and the schema's own text; `digits_only`: an integer of draft
   4, which counts 2.0 as no integer, written with its digits alone. */
static void gpt2__schema_number_literal(gpt2__string* out, const gpt2__json& v, bool digits_only = false) {
    gpt2__schema_decimal d;
    if (!gpt2__schema_decimal_of(v, &d)) return gpt2__schema_literal(out, v.text);
    *out += d.zero() ? "(\"-\"? " : "(";
    gpt2__schema_literal(out, gpt2__schema_decimal_text(d));
    if (digits_only) {
        *out += ")";
        return;
    }
    *out += d.fraction.empty() ? " (\".\" \"0\"+)?" : " \"0\"*";
    if (v.text.find_first_of("eE") != gpt2__string::npos) *out += " | ", gpt2__schema_literal(out, v.text);
    *out += ")";
}

enum { GPT2__SCHEMA_MAX_ANY_ORDER_KEYS = 6 };

/* A JSON value written as JSON (strings with the fewest escapes), for const and enum: as GBNF
   elements, with whitespace where JSON allows it. An object's members in any order (JSON Schema
   compares objects whatever their order), where it has at most GPT2__SCHEMA_MAX_ANY_ORDER_KEYS
   (a rule per set of members written); past that, in the order written. */
static void gpt2__schema_json_literal(gpt2__schema_converter* cv, const gpt2__json& v, gpt2__string* out) {
    switch (v.kind) {
    case GPT2__JSON_NULL: *out += "\"null\""; break;
    case GPT2__JSON_BOOL: *out += v.boolean ? "\"true\"" : "\"false\""; break;
    case GPT2__JSON_NUMBER: gpt2__schema_number_literal(out, v); break;
    case GPT2__JSON_STRING: {
        gpt2__string json = "\"";
        for (unsigned char c : v.text) {
            char buf[8];
            if (c == '"' || c == '\\') json.push_back('\\'), json.push_back((char)c);
            else if (c == '\n') json += "\\n";
            else if (c == '\t') json += "\\t";
            else if (c == '\r') json += "\\r";
            else if (c == '\b') json += "\\b";
            else if (c == '\f') json += "\\f";
            else if (c < 0x20) std::snprintf(buf, sizeof buf, "\\u%04x", c), json += buf;
            else json.push_back((char)c);
        }
        json.push_back('"');
        gpt2__schema_literal(out, json);
        break;
    }
    case GPT2__JSON_ARRAY:
    case GPT2__JSON_OBJECT: {
        const bool object = v.kind == GPT2__JSON_OBJECT;
        const char* ws = gpt2__schema_ws(cv);
        gpt2__vector<gpt2__string> members;
        for (size_t i = 0; i < v.items.size(); i++) {
            gpt2__string m;
            if (object) {
                gpt2__json key;
                key.kind = GPT2__JSON_STRING;
                key.text = v.keys[i];
                gpt2__schema_json_literal(cv, key, &m);
                m += ws, m += " \":\" ", m += ws;
            }
            m += " ";
            gpt2__schema_json_literal(cv, v.items[i], &m);
            m += ws;
            members.push_back(std::move(m));
        }
        *out += object ? "\"{\"" : "\"[\"";
        *out += ws;
        const size_t n = members.size();
        if (object && n > 1 && n <= GPT2__SCHEMA_MAX_ANY_ORDER_KEYS) {
            gpt2__vector<gpt2__string> name((size_t)1 << n), member(n);
            for (size_t i = 0; i < n; i++) member[i] = gpt2__schema_add_rule(cv, members[i]);
            for (auto& r : name) r = gpt2__schema_rule_name(cv);
            for (size_t set = 0; set < name.size(); set++) {
                gpt2__string alts;
                for (size_t i = 0; i < n; i++)
                    if (!(set >> i & 1)) (alts += alts.empty() ? "" : " | ") += (set ? "\",\" " + gpt2__string(ws) + " " : gpt2__string()) + member[i] + " " + name[set | (size_t)1 << i];
                cv->rules += name[set] + " ::= " + (alts.empty() ? gpt2__string("\"\"") : alts) + "\n";
            }
            *out += " " + name[0];
        } else {
            for (size_t i = 0; i < n; i++) {
                if (i) *out += " \",\" ", *out += ws;
                *out += members[i];
            }
        }
        *out += object ? " \"}\"" : " \"]\"";
        break;
    }
    }
}

/* The JSON types a value has (an integer-valued number is both integer and number). */
static unsigned gpt2__json_types(const gpt2__json& v) {
    switch (v.kind) {
    case GPT2__JSON_NULL: return GPT2__T_NULL;
    case GPT2__JSON_BOOL: return GPT2__T_BOOL;
    case GPT2__JSON_STRING: return GPT2__T_STRING;
    case GPT2__JSON_ARRAY: return GPT2__T_ARRAY;
    case GPT2__JSON_OBJECT: return GPT2__T_OBJECT;
    case GPT2__JSON_NUMBER: return v.text.find_first_of(".eE") == gpt2__string::npos ? GPT2__T_NUMBER | GPT2__T_INTEGER : GPT2__T_NUMBER;
    }
    return 0;
}

static gpt2_result gpt2__schema_types(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, unsigned* types) {
    static const char* const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    auto one = [&](const gpt2__json& t, unsigned* bit) {
        if (t.kind == GPT2__JSON_STRING)
            for (unsigned i = 0; i < 7; i++)
                if (t.text == names[i]) {
                    *bit = 1u << i;
                    return GPT2_OK;
                }
        return gpt2__schema_refuse(cv, kw.pointer, "expected a type name (null, boolean, integer, number, string, array, object) or an array of them");
    };
    *types = 0;
    if (kw.value->kind == GPT2__JSON_ARRAY) {
        for (const auto& t : kw.value->items) {
            unsigned bit = 0;
            GPT2__TRY(one(t, &bit));
            *types |= bit;
        }
        return GPT2_OK;
    }
    return one(*kw.value, types);
}

static bool gpt2__schema_annotation(std::string_view k) {
    static const char* const words[] = {"title", "description", "$schema", "$id", "id", "examples", "example", "default", "$comment",
                                        "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "$anchor", "$vocabulary",
                                        "contentMediaType", "contentEncoding", "contentSchema", "$dynamicAnchor", "$recursiveAnchor"};
    for (const char* w : words)
        if (k == w) return true;
    return false;
}

/* Keywords the converter writes into the schemas it makes itself (complements): no draft has
   them. A document that writes one gets a stricter grammar, never a looser one. */
#define GPT2__KW_NOT_IN "\x01notIn"               /* none of these values (strings, arrays, objects) */
#define GPT2__KW_FRACTION "\x01fraction"          /* numbers: with a fraction that is not zero (no integer) */
#define GPT2__KW_NOT_MULTIPLE "\x01notMultipleOf" /* numbers: not a multiple of this */
#define GPT2__KW_AT "\x01at"                     /* the schema at this JSON pointer of the document */

/* Keywords that constrain and that the converter enforces (the rest of the constraining ones
   are refused; unknown keywords are ignored, as JSON Schema ignores them). `then` and `else` are
   read with their `if`, `minContains` and `maxContains` with their `contains` (in the same
   schema object), so they are not keywords of a view of their own. */
static bool gpt2__schema_known(std::string_view k) {
    static const char* const words[] = {
        "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required", "additionalProperties", "items",
        "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "uniqueItems", "multipleOf", "pattern", "patternProperties", "propertyNames",
        "minProperties", "maxProperties", "dependencies", "dependentRequired", "dependentSchemas", "if", "not",
        "contains", "unevaluatedProperties", "unevaluatedItems", "format", "$dynamicRef", "$recursiveRef",
        GPT2__KW_NOT_IN, GPT2__KW_FRACTION, GPT2__KW_NOT_MULTIPLE, GPT2__KW_AT};
    for (const char* w : words)
        if (k == w) return true;
    return false;
}

/* A schema's keywords as a view; `pointer` is the schema's own. */
static void gpt2__schema_view_of(const gpt2__json& schema, std::string_view pointer, gpt2__schema_view* view, uint16_t level = 0, bool evaluates = true,
                                 bool made = false) {
    for (size_t i = 0; i < schema.keys.size(); i++) {
        if (gpt2__schema_annotation(schema.keys[i]) || !gpt2__schema_known(schema.keys[i])) continue;
        gpt2__schema_kw kw;
        kw.key = schema.keys[i];
        kw.value = &schema.items[i];
        kw.pointer = gpt2__string(pointer) + "/" + gpt2__schema_escape_pointer(schema.keys[i]);
        kw.owner = &schema;
        kw.level = level;
        kw.evaluates = evaluates;
        kw.made = made;
        view->push_back(std::move(kw));
    }
}

static const gpt2__schema_kw* gpt2__schema_find(const gpt2__schema_view& view, std::string_view key) {
    for (const auto& kw : view)
        if (kw.key == key) return &kw;
    return nullptr;
}

/* ---- Where $refs point: URIs, $ids and anchors ------------------------------------------- */

/* A URI reference split as RFC 3986 (appendix B) splits it. */
struct gpt2__uri {
    std::string_view scheme, authority, path, query, fragment;
    bool has_scheme = false, has_authority = false, has_query = false, has_fragment = false;
};

static gpt2__uri gpt2__uri_split(std::string_view s) {
    gpt2__uri u;
    const size_t hash = s.find('#');
    if (hash != std::string_view::npos) u.has_fragment = true, u.fragment = s.substr(hash + 1), s = s.substr(0, hash);
    const size_t question = s.find('?');
    if (question != std::string_view::npos) u.has_query = true, u.query = s.substr(question + 1), s = s.substr(0, question);
    const size_t colon = s.find(':');
    if (colon != std::string_view::npos && colon > 0 && s.substr(0, colon).find('/') == std::string_view::npos) u.has_scheme = true, u.scheme = s.substr(0, colon), s = s.substr(colon + 1);
    if (s.size() >= 2 && s[0] == '/' && s[1] == '/') {
        const size_t end = s.find('/', 2);
        u.has_authority = true;
        u.authority = s.substr(2, end == std::string_view::npos ? std::string_view::npos : end - 2);
        s = end == std::string_view::npos ? std::string_view() : s.substr(end);
    }
    u.path = s;
    return u;
}

/* RFC 3986's remove_dot_segments. */
static gpt2__string gpt2__uri_remove_dots(std::string_view in) {
    gpt2__string out;
    while (!in.empty()) {
        if (in.substr(0, 3) == "../") in.remove_prefix(3);
        else if (in.substr(0, 2) == "./") in.remove_prefix(2);
        else if (in.substr(0, 3) == "/./") in.remove_prefix(2);
        else if (in == "/.") in = "/";
        else if (in.substr(0, 4) == "/../" || in == "/..") {
            in = in.size() == 3 ? std::string_view("/") : in.substr(3);
            const size_t last = out.rfind('/');
            out.erase(last == gpt2__string::npos ? 0 : last);
        } else if (in == "." || in == "..") in = std::string_view();
        else {
            const size_t next = in.find('/', in[0] == '/' ? 1 : 0);
            out.append(in.substr(0, next));
            in = next == std::string_view::npos ? std::string_view() : in.substr(next);
        }
    }
    return out;
}

/* `ref` resolved against the absolute URI `base` (RFC 3986, 5.2.2). */
static gpt2__string gpt2__uri_resolve(std::string_view base_text, std::string_view ref_text) {
    const gpt2__uri base = gpt2__uri_split(base_text), ref = gpt2__uri_split(ref_text);
    gpt2__string scheme, authority, path, query;
    bool has_authority = false, has_query = false;
    if (ref.has_scheme) {
        scheme = ref.scheme, has_authority = ref.has_authority, authority = ref.authority, path = gpt2__uri_remove_dots(ref.path);
        has_query = ref.has_query, query = ref.query;
    } else {
        scheme = base.scheme;
        if (ref.has_authority) {
            has_authority = true, authority = ref.authority, path = gpt2__uri_remove_dots(ref.path), has_query = ref.has_query, query = ref.query;
        } else {
            has_authority = base.has_authority, authority = base.authority;
            if (ref.path.empty()) {
                path = base.path;
                has_query = ref.has_query || base.has_query, query = ref.has_query ? ref.query : base.query;
            } else {
                if (ref.path[0] == '/') path = gpt2__uri_remove_dots(ref.path);
                else {
                    gpt2__string merged;
                    if (base.has_authority && base.path.empty()) merged = "/" + gpt2__string(ref.path);
                    else {
                        const size_t slash = base.path.rfind('/');
                        merged = gpt2__string(slash == std::string_view::npos ? std::string_view() : base.path.substr(0, slash + 1)) + gpt2__string(ref.path);
                    }
                    path = gpt2__uri_remove_dots(merged);
                }
                has_query = ref.has_query, query = ref.query;
            }
        }
    }
    gpt2__string out;
    if (!scheme.empty() || base.has_scheme || ref.has_scheme) out += scheme + ":";
    if (has_authority) out += "//" + authority;
    out += path;
    if (has_query) out += "?" + query;
    if (ref.has_fragment) out += "#" + gpt2__string(ref.fragment);
    return out;
}

/* %XX escapes decoded (a fragment's JSON pointer or anchor). */
static gpt2__string gpt2__uri_decode(std::string_view s) {
    gpt2__string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '%' && i + 2 < s.size() && std::isxdigit((unsigned char)s[i + 1]) && std::isxdigit((unsigned char)s[i + 2])) {
            out.push_back((char)std::strtol(gpt2__string(s.substr(i + 1, 2)).c_str(), nullptr, 16));
            i += 2;
        } else out.push_back(s[i]);
    }
    return out;
}

/* How a keyword holds schemas: 1 its value is one, 2 an object of them, 3 an array of them, 4
   one or an array (items, draft 4-7's dependencies: one or a list of names); 0 none. */
static int gpt2__schema_holds(std::string_view k) {
    static const char* const one[] = {"additionalItems", "additionalProperties", "contains", "propertyNames", "not", "if", "then", "else",
                                      "unevaluatedItems", "unevaluatedProperties", "contentSchema"};
    static const char* const object[] = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"};
    static const char* const array[] = {"allOf", "anyOf", "oneOf", "prefixItems"};
    for (const char* w : one)
        if (k == w) return 1;
    for (const char* w : object)
        if (k == w) return 2;
    for (const char* w : array)
        if (k == w) return 3;
    return k == "items" ? 4 : 0;
}

/* The value at a JSON pointer ("/a/0/b~1c") of the document; NULL where there is none. */
static const gpt2__json* gpt2__json_at(const gpt2__json* at, std::string_view pointer) {
    size_t i = 0;
    while (at && i < pointer.size()) {
        if (pointer[i] != '/') return nullptr;
        size_t end = pointer.find('/', i + 1);
        if (end == std::string_view::npos) end = pointer.size();
        gpt2__string token;
        for (size_t j = i + 1; j < end; j++) {
            if (pointer[j] == '~' && j + 1 < end && (pointer[j + 1] == '0' || pointer[j + 1] == '1')) token.push_back(pointer[++j] == '0' ? '~' : '/');
            else token.push_back(pointer[j]);
        }
        const gpt2__json* next = nullptr;
        if (at->kind == GPT2__JSON_OBJECT) next = at->get(token);
        else if (at->kind == GPT2__JSON_ARRAY && !token.empty() && token.find_first_not_of("0123456789") == gpt2__string::npos && token.size() < 9 && (token == "0" || token[0] != '0')) {
            const size_t index = (size_t)std::strtoul(token.c_str(), nullptr, 10);
            if (index < at->items.size()) next = &at->items[index];
        }
        at = next;
        i = end;
    }
    return at;
}

/* Names every schema of the document (those at the places the keywords that hold schemas give):
   an $id makes a resource, its URI resolved against the base around it; an $anchor (draft 7: an
   $id that is a fragment) a name within it. Draft 7 and before ignore every keyword beside a
   $ref, its $id too; where the draft is not known and an $id stands beside a $ref, a $ref is
   not resolved (*ambiguous names where). */
static gpt2_result gpt2__schema_index(gpt2__schema_converter* cv, const gpt2__json& schema, const gpt2__string& pointer, const gpt2__string& base_in, int depth,
                                      gpt2__string* ambiguous) {
    if (schema.kind != GPT2__JSON_OBJECT) return GPT2_OK;
    if (depth > GPT2__JSON_MAX_DEPTH) return gpt2__schema_refuse(cv, pointer, "schemas nest too deep");
    gpt2__string base = base_in;
    const bool old_draft = cv->draft == GPT2__DRAFT_7_OR_OLDER;
    const gpt2__json* ref = schema.get("$ref");
    const gpt2__json* id = schema.get("$id");
    if (!id && old_draft) id = schema.get("id");
    if (!id && cv->draft == GPT2__DRAFT_UNKNOWN && !pointer.empty() && schema.get("id") && schema.get("id")->kind == GPT2__JSON_STRING &&
        !schema.get("id")->text.empty() && schema.get("id")->text[0] != '#' && ambiguous->empty())
        *ambiguous = pointer + "/id"; /* draft 4's $id, or an unknown keyword: the draft decides */
    bool resource = false;
    if (id && id->kind == GPT2__JSON_STRING && !(old_draft && ref)) {
        if (ref && cv->draft == GPT2__DRAFT_UNKNOWN && (id->text.empty() || id->text[0] != '#') && ambiguous->empty()) *ambiguous = pointer + "/$id";
        const gpt2__string resolved = gpt2__uri_resolve(base, id->text);
        const size_t hash = resolved.find('#');
        if (hash != gpt2__string::npos && hash + 1 < resolved.size() && cv->draft != GPT2__DRAFT_2019_OR_NEWER) {
            cv->names.push_back({resolved, pointer, false}); /* draft 7's anchor: "$id": "#foo" */
        } else {
            base = resolved.substr(0, hash);
            cv->names.push_back({base, pointer, false});
            resource = true;
        }
    }
    if (pointer.empty() && !resource) cv->names.push_back({base, pointer, false}); /* the document itself */
    for (const char* anchor : {"$anchor", "$dynamicAnchor"})
        if (const gpt2__json* a = schema.get(anchor); a && a->kind == GPT2__JSON_STRING)
            cv->names.push_back({base + "#" + a->text, pointer, anchor[1] == 'd'});
    for (size_t i = 0; i < schema.keys.size(); i++) {
        const int holds = gpt2__schema_holds(schema.keys[i]);
        const gpt2__json& v = schema.items[i];
        const gpt2__string at = pointer + "/" + gpt2__schema_escape_pointer(schema.keys[i]);
        if (holds == 1 || (holds == 4 && v.kind == GPT2__JSON_OBJECT)) GPT2__TRY(gpt2__schema_index(cv, v, at, base, depth + 1, ambiguous));
        else if (holds == 2 && v.kind == GPT2__JSON_OBJECT)
            for (size_t k = 0; k < v.keys.size(); k++) GPT2__TRY(gpt2__schema_index(cv, v.items[k], at + "/" + gpt2__schema_escape_pointer(v.keys[k]), base, depth + 1, ambiguous));
        else if ((holds == 3 || holds == 4) && v.kind == GPT2__JSON_ARRAY)
            for (size_t k = 0; k < v.items.size(); k++) {
                char index[24];
                std::snprintf(index, sizeof index, "/%zu", k);
                GPT2__TRY(gpt2__schema_index(cv, v.items[k], at + index, base, depth + 1, ambiguous));
            }
    }
    return GPT2_OK;
}

/* The base URI at a place of the document: that of the innermost resource around it. */
static const gpt2__string& gpt2__schema_base_at(const gpt2__schema_converter* cv, std::string_view pointer) {
    const gpt2__schema_name* best = nullptr;
    for (const auto& n : cv->names) {
        if (n.uri.find('#') != gpt2__string::npos) continue; /* an anchor */
        const bool around = pointer.substr(0, n.pointer.size()) == n.pointer && (pointer.size() == n.pointer.size() || pointer[n.pointer.size()] == '/');
        if (around && (!best || n.pointer.size() >= best->pointer.size())) best = &n;
    }
    return best->uri; /* the document's own name is always there */
}

static gpt2_result gpt2__schema_unresolved(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, const char* why) {
    return gpt2__fail(cv->err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %s: unresolved %.*s '%s'%s", kw.pointer.c_str(), (int)kw.key.size(), kw.key.data(), kw.value->text.c_str(), why);
}

/* Resolves a $ref (also $dynamicRef and $recursiveRef, read statically where that is exact):
   against the base URI where it is written, to a schema of this document by its resource and a
   JSON pointer or an anchor. A schema of another document is not read. */
static gpt2_result gpt2__schema_resolve(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, const gpt2__json** target, gpt2__string* target_pointer) {
    if (kw.value->kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, kw.pointer, "$ref must be a string");
    if (kw.key == GPT2__KW_AT) {
        *target_pointer = kw.value->text;
        *target = gpt2__json_at(cv->root, *target_pointer);
        if (!*target) return gpt2__schema_unresolved(cv, kw, "");
        return GPT2_OK;
    }
    if (!cv->ambiguous_id.empty())
        return gpt2__schema_refuse(cv, cv->ambiguous_id, "where this $id points the $refs under it depends on the draft (draft 7 ignores an $id beside a $ref, draft 4 calls it \"id\"): name the draft with \"$schema\"");
    const std::string_view location = std::string_view(kw.pointer).substr(0, kw.pointer.rfind('/'));
    const gpt2__string full = gpt2__uri_resolve(gpt2__schema_base_at(cv, location), kw.value->text);
    const size_t hash = full.find('#');
    const gpt2__string resource = full.substr(0, hash), fragment = hash == gpt2__string::npos ? gpt2__string() : gpt2__uri_decode(std::string_view(full).substr(hash + 1));
    const gpt2__schema_name* found = nullptr;
    for (const auto& n : cv->names)
        if (n.uri == resource) found = &n;
    if (!found) return gpt2__schema_unresolved(cv, kw, " (a schema of another document: only this document's schemas are read)");
    *target_pointer = found->pointer;
    if (!fragment.empty() && fragment[0] != '/') { /* an anchor */
        found = nullptr;
        for (const auto& n : cv->names)
            if (n.uri == resource + "#" + fragment) found = &n;
        if (!found) return gpt2__schema_unresolved(cv, kw, " (no schema of the document has this anchor)");
        *target_pointer = found->pointer;
    } else {
        *target_pointer += fragment;
    }
    *target = gpt2__json_at(cv->root, *target_pointer);
    if (!*target) return gpt2__schema_unresolved(cv, kw, kw.value->text.find('/') != gpt2__string::npos ? "" : " (not a JSON pointer)");
    if (kw.key == "$dynamicRef" && found && found->dynamic && !fragment.empty() && fragment[0] != '/') {
        /* the outermost resource of the dynamic scope with this $dynamicAnchor: the document's
           own resource where it has one, else the one resource that has it */
        const gpt2__schema_name* outer = nullptr;
        size_t n_dynamic = 0;
        for (const auto& n : cv->names)
            if (n.dynamic && n.uri.size() > fragment.size() && n.uri.compare(n.uri.size() - fragment.size() - 1, gpt2__string::npos, "#" + fragment) == 0) {
                n_dynamic++;
                if (n.uri == gpt2__schema_base_at(cv, "") + "#" + fragment) outer = &n;
            }
        if (!outer && n_dynamic > 1)
            return gpt2__schema_refuse(cv, kw.pointer, "'$dynamicRef' is enforced where its anchor names one schema or the document's own (here the dynamic scope decides)");
        if (outer) *target_pointer = outer->pointer, *target = gpt2__json_at(cv->root, outer->pointer);
    }
    if (kw.key == "$recursiveRef") {
        const gpt2__json* anchor = (*target)->kind == GPT2__JSON_OBJECT ? (*target)->get("$recursiveAnchor") : nullptr;
        const gpt2__json* root_anchor = cv->root->kind == GPT2__JSON_OBJECT ? cv->root->get("$recursiveAnchor") : nullptr;
        if (anchor && anchor->kind == GPT2__JSON_BOOL && anchor->boolean && root_anchor && root_anchor->kind == GPT2__JSON_BOOL && root_anchor->boolean)
            *target_pointer = "", *target = cv->root;
    }
    return GPT2_OK;
}

/* The rule of a $ref's target: made once, written later (so recursion through refs is a rule
   that names itself, not a recursion of the converter). */
static gpt2_result gpt2__schema_ref_rule(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, gpt2__string* rule) {
    const gpt2__json* target;
    gpt2__string pointer;
    GPT2__TRY(gpt2__schema_resolve(cv, kw, &target, &pointer));
    for (const auto& r : cv->refs)
        if (r.first == pointer) {
            *rule = r.second;
            return GPT2_OK;
        }
    *rule = gpt2__schema_rule_name(cv);
    cv->refs.emplace_back(pointer, *rule);
    cv->pending.emplace_back(pointer, target);
    return GPT2_OK;
}

static gpt2_result gpt2__schema_expr(gpt2__schema_converter* cv, const gpt2__json& schema, std::string_view pointer, gpt2__string* out, bool* impossible, int depth);
static gpt2_result gpt2__schema_view_expr(gpt2__schema_converter* cv, gpt2__schema_view view, std::string_view pointer, gpt2__string* out, bool* impossible, int depth);

static bool gpt2__schema_is_ref(std::string_view key) { return key == "$ref" || key == "$dynamicRef" || key == "$recursiveRef" || key == GPT2__KW_AT; }

/* A view with allOf's parts and the targets of its $refs (where other keywords stand beside
   them) merged in: every part's keywords hold, each read where it was written. The parts' and
   targets' keywords come before those of the schema they are written in (in their order), so
   their properties come before the schema's own in the objects written, as a base class's fields
   come before a subclass's. A target merged twice is merged
   once (A and A is A), which also ends a cycle of $refs. *impossible: a part is false. */
static gpt2_result gpt2__schema_normalize(gpt2__schema_converter* cv, gpt2__schema_view* view, bool* impossible) {
    gpt2__vector<gpt2__string> merged_targets;
    for (size_t steps = 0;; steps++) {
        size_t at = 0;
        while (at < view->size() && (*view)[at].key != "allOf" && !(gpt2__schema_is_ref((*view)[at].key) && view->size() > 1)) at++;
        if (at == view->size()) return GPT2_OK;
        const gpt2__schema_kw kw = (*view)[at];
        if (steps > 4 * GPT2__SCHEMA_MAX_DEPTH) return gpt2__schema_refuse(cv, kw.pointer, "allOf and $ref nest too deep to merge");
        size_t first = 0; /* where the keywords of its schema begin: the parts go before them */
        while ((*view)[first].owner != kw.owner) first++;
        view->erase(view->begin() + (ptrdiff_t)at);
        gpt2__schema_view parts;
        if (kw.key == "allOf") {
            if (kw.value->kind != GPT2__JSON_ARRAY || kw.value->items.empty()) return gpt2__schema_refuse(cv, kw.pointer, "allOf must be a non-empty array of schemas");
            for (size_t i = 0; i < kw.value->items.size(); i++) {
                const gpt2__json& part = kw.value->items[i];
                char index[24];
                std::snprintf(index, sizeof index, "/%zu", i);
                if (part.kind == GPT2__JSON_BOOL) {
                    if (part.boolean) continue;
                    *impossible = true;
                    return GPT2_OK;
                }
                if (part.kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, kw.pointer + index, "a schema must be an object or a boolean");
                gpt2__schema_view_of(part, kw.pointer + index, &parts, (uint16_t)(kw.level + 1), kw.evaluates, kw.made);
            }
        } else {
            const gpt2__json* target;
            gpt2__string target_pointer;
            GPT2__TRY(gpt2__schema_resolve(cv, kw, &target, &target_pointer));
            if (std::find(merged_targets.begin(), merged_targets.end(), target_pointer) != merged_targets.end()) continue;
            merged_targets.push_back(target_pointer);
            if (target->kind == GPT2__JSON_BOOL) {
                if (target->boolean) continue;
                *impossible = true;
                return GPT2_OK;
            }
            if (target->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, kw.pointer, "a $ref must point to a schema (an object or a boolean)");
            gpt2__schema_view_of(*target, target_pointer, &parts, (uint16_t)(kw.level + 1), kw.evaluates);
        }
        view->insert(view->begin() + (ptrdiff_t)first, parts.begin(), parts.end());
    }
}

/* A count (minLength, maxItems, ...): a whole number from 0 to 65536, written as an integer or
   with a fraction of zeros (2.0). */
static gpt2_result gpt2__schema_uint(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, uint32_t* v) {
    gpt2__schema_decimal d;
    if (!gpt2__schema_decimal_of(*kw.value, &d) || d.negative || !d.fraction.empty() || d.whole > GPT2__GRAMMAR_MAX_REPEAT)
        return gpt2__schema_refuse(cv, kw.pointer, "expected a whole number from 0 to 65536");
    *v = (uint32_t)d.whole;
    return GPT2_OK;
}

/* Every keyword of the view named `key` (several where allOf's parts or branches each have one). */
static gpt2__vector<const gpt2__schema_kw*> gpt2__schema_all(const gpt2__schema_view& view, std::string_view key) {
    gpt2__vector<const gpt2__schema_kw*> out;
    for (const auto& kw : view)
        if (kw.key == key) out.push_back(&kw);
    return out;
}

/* The tightest of a count keyword written one or more times: the greatest minimum, the least
   maximum. *present: whether there is one; *which: the one that holds it. */
static gpt2_result gpt2__schema_count(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view key, bool at_least, uint32_t* v, bool* present,
                                      const gpt2__schema_kw** which = nullptr) {
    *present = false;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, key)) {
        uint32_t x = 0;
        GPT2__TRY(gpt2__schema_uint(cv, *kw, &x));
        if (!*present || (at_least ? x > *v : x < *v)) {
            *v = x;
            if (which) *which = kw;
        }
        *present = true;
    }
    return GPT2_OK;
}

/* The integers of [lo, hi] (lo <= hi, both >= 0; hi < 0: no bound) as digits without leading
   zeros: one alternative per digit count, and within a count the classic split on the first
   digit that differs. */
static void gpt2__schema_digits(gpt2__string* out, const char* lo, const char* hi, size_t n) {
    if (n == 0) return;
    bool lo_zeros = true, hi_nines = true;
    for (size_t i = 1; i < n; i++) lo_zeros &= lo[i] == '0', hi_nines &= hi[i] == '9';
    char buf[64];
    if (lo_zeros && hi_nines) {
        std::snprintf(buf, sizeof buf, "[%c-%c]", lo[0], hi[0]);
        *out += buf;
        if (n > 1) std::snprintf(buf, sizeof buf, " [0-9]{%zu}", n - 1), *out += buf;
        return;
    }
    if (lo[0] == hi[0]) {
        std::snprintf(buf, sizeof buf, "\"%c\" ", lo[0]);
        *out += buf;
        gpt2__schema_digits(out, lo + 1, hi + 1, n - 1);
        return;
    }
    char nines[24], zeros[24];
    std::memset(nines, '9', sizeof nines), std::memset(zeros, '0', sizeof zeros);
    *out += "(\"";
    out->push_back(lo[0]);
    *out += "\" ";
    gpt2__schema_digits(out, lo + 1, nines, n - 1);
    if (hi[0] - lo[0] > 1) {
        std::snprintf(buf, sizeof buf, " | [%c-%c]", lo[0] + 1, hi[0] - 1);
        *out += buf;
        if (n > 1) std::snprintf(buf, sizeof buf, " [0-9]{%zu}", n - 1), *out += buf;
    }
    *out += " | \"";
    out->push_back(hi[0]);
    *out += "\" ";
    gpt2__schema_digits(out, zeros, hi + 1, n - 1);
    *out += ")";
}

static void gpt2__schema_natural_range(gpt2__string* out, long long lo, long long hi) {
    char los[24], his[24];
    const int lo_len = std::snprintf(los, sizeof los, "%lld", lo);
    const int hi_len = hi < 0 ? 19 : std::snprintf(his, sizeof his, "%lld", hi);
    *out += "(";
    bool first = true;
    for (int len = lo_len; len <= hi_len; len++) {
        char a[24], b[24];
        if (len == lo_len) std::memcpy(a, los, (size_t)len);
        else a[0] = '1', std::memset(a + 1, '0', (size_t)len - 1);
        if (hi >= 0 && len == hi_len) std::memcpy(b, his, (size_t)len);
        else std::memset(b, '9', (size_t)len);
        if (!first) *out += " | ";
        first = false;
        gpt2__schema_digits(out, a, b, (size_t)len);
    }
    if (hi < 0) *out += " | [1-9] [0-9]{19,}";
    *out += ")";
}

/* The four keywords gpt2__schema_bounds reads. */
static bool gpt2__schema_is_bound(std::string_view key) {
    return key == "minimum" || key == "maximum" || key == "exclusiveMinimum" || key == "exclusiveMaximum";
}

/* The value's bounds from minimum, maximum, exclusiveMinimum and exclusiveMaximum (draft 4's
   boolean exclusives too, read with the minimum or maximum of their own schema), the tightest of
   all of them on each side. */
static gpt2_result gpt2__schema_bounds(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__schema_end* lower, gpt2__schema_end* upper) {
    auto take = [&](const gpt2__schema_kw& kw, bool strict, gpt2__schema_end* end) {
        gpt2__schema_decimal v;
        if (!gpt2__schema_decimal_of(*kw.value, &v))
            return gpt2__schema_refuse(cv, kw.pointer, "a number bound must be a number with at most 18 digits before its point and 64 after");
        const bool tighter = !end->present || (end == lower ? gpt2__schema_decimal_less(end->at, v) : gpt2__schema_decimal_less(v, end->at)) ||
                             (!gpt2__schema_decimal_less(end->at, v) && !gpt2__schema_decimal_less(v, end->at) && strict);
        if (tighter) end->present = true, end->strict = strict, end->at = v;
        return GPT2_OK;
    };
    for (const auto& kw : view) {
        const bool is_min = kw.key == "minimum", is_max = kw.key == "maximum";
        if (is_min || is_max) {
            const gpt2__json* ex = kw.owner ? kw.owner->get(is_min ? "exclusiveMinimum" : "exclusiveMaximum") : nullptr;
            GPT2__TRY(take(kw, ex && ex->kind == GPT2__JSON_BOOL && ex->boolean, is_min ? lower : upper));
        } else if ((kw.key == "exclusiveMinimum" || kw.key == "exclusiveMaximum") && kw.value->kind != GPT2__JSON_BOOL) {
            GPT2__TRY(take(kw, true, kw.key == "exclusiveMinimum" ? lower : upper));
        }
    }
    return GPT2_OK;
}

/* Whether a number lies between two ends (each absent, inclusive or strict). */
static bool gpt2__schema_between(const gpt2__schema_end& lower, const gpt2__schema_end& upper, const gpt2__schema_decimal& d) {
    const bool above_lower = !lower.present || (lower.strict ? gpt2__schema_decimal_less(lower.at, d) : !gpt2__schema_decimal_less(d, lower.at));
    const bool below_upper = !upper.present || (upper.strict ? gpt2__schema_decimal_less(d, upper.at) : !gpt2__schema_decimal_less(upper.at, d));
    return above_lower && below_upper;
}

/* The least integer that a lower end lets in, or the greatest that an upper end does. */
static long long gpt2__schema_integer_end(const gpt2__schema_end& end, bool is_lower) {
    const gpt2__schema_decimal& d = end.at;
    const long long toward_zero = d.negative ? -d.whole : d.whole;
    const bool whole = d.fraction.empty();
    const long long floor = toward_zero - (!whole && d.negative), ceil = toward_zero + (!whole && !d.negative);
    return is_lower ? (end.strict ? floor + 1 : ceil) : (end.strict ? ceil - 1 : floor);
}

/* The integers between the view's bounds (none: *impossible). */
static gpt2_result gpt2__schema_integer(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view pointer, gpt2__string* out, bool* impossible) {
    gpt2__schema_end lower, upper;
    GPT2__TRY(gpt2__schema_bounds(cv, view, &lower, &upper));
    const bool has_lo = lower.present, has_hi = upper.present;
    const long long lo = has_lo ? gpt2__schema_integer_end(lower, true) : 0, hi = has_hi ? gpt2__schema_integer_end(upper, false) : 0;
    const char* zeros = cv->integer_fraction ? " (\".\" \"0\"+)?" : ""; /* 1.0 is the integer 1 */
    if (!has_lo && !has_hi) {
        cv->used_integer = true;
        *out = cv->integer_fraction ? gpt2__schema_add_rule(cv, gpt2__string("integer") + zeros) : "integer";
        return GPT2_OK;
    }
    if (has_lo && has_hi && lo > hi) {
        char why[128];
        std::snprintf(why, sizeof why, "no integer is at least %lld and at most %lld", lo, hi);
        return gpt2__schema_contradiction(cv, pointer, why, impossible);
    }
    gpt2__string alts;
    /* negatives: "-" and |x| in [max(1, -hi), -lo] */
    if (!has_lo || lo < 0) {
        const long long a = has_hi ? (hi < 0 ? -hi : 1) : 1;
        alts += "\"-\" ";
        gpt2__schema_natural_range(&alts, a, has_lo ? -lo : -1);
    }
    if (!has_hi || hi >= 0) {
        if (!alts.empty()) alts += " | ";
        const long long a = has_lo && lo > 0 ? lo : 0;
        gpt2__schema_natural_range(&alts, a, has_hi ? hi : -1);
    }
    *out = gpt2__schema_add_rule(cv, *zeros ? "(" + alts + ")" + zeros : alts);
    return GPT2_OK;
}

/* The digits after a number's point whose value f lies between two ends' fractions (each
   absent, or f compared with its fraction digits), made a digit at a time as a comparison
   reads them: a position, and whether the digits so far still equal each end's. */
struct gpt2__schema_fraction {
    gpt2__schema_converter* cv;
    const gpt2__schema_end* lower;
    const gpt2__schema_end* upper;
};

/* Whether the digits may stop at position i (the rest being zeros). */
static bool gpt2__schema_fraction_may_stop(const gpt2__schema_fraction& f, size_t i, bool on_lower, bool on_upper) {
    const bool above = !on_lower || (i >= f.lower->at.fraction.size() && !f.lower->strict); /* before its end, an end's digits left are not all zero */
    const bool below = !on_upper || i < f.upper->at.fraction.size() || !f.upper->strict;
    return above && below;
}

/* The digits from position i on (none allowed where may_be_empty), as a GBNF expression; ""
   when no digits can follow. */
static gpt2__string gpt2__schema_fraction_from(const gpt2__schema_fraction& f, size_t i, bool on_lower, bool on_upper, bool may_be_empty) {
    const gpt2__string& c = f.lower->at.fraction;
    const gpt2__string& d = f.upper->at.fraction;
    if (!on_lower && !on_upper) return may_be_empty ? "[0-9]*" : "[0-9]+";
    if (i >= c.size() && i >= d.size()) { /* the ends' digits are used up: zeros from here on */
        if (on_lower && on_upper) return f.lower->strict || f.upper->strict ? "" : may_be_empty ? "\"0\"*" : "\"0\"+";
        if (on_lower) return f.lower->strict ? "\"0\"* [1-9] [0-9]*" : may_be_empty ? "[0-9]*" : "[0-9]+";
        return f.upper->strict ? "" : may_be_empty ? "\"0\"*" : "\"0\"+";
    }
    gpt2__string alts;
    auto add = [&](const gpt2__string& a) { alts += alts.empty() ? "" : " | ", alts += a; };
    if (may_be_empty && gpt2__schema_fraction_may_stop(f, i, on_lower, on_upper)) add("\"\"");
    const char lo = on_lower && i < c.size() ? c[i] : '0', hi = !on_upper ? '9' : i < d.size() ? d[i] : '0';
    char buf[16];
    for (char x = lo; x <= hi; x++) {
        const bool still_lower = on_lower && x == lo, still_upper = on_upper && x == hi;
        if (!still_lower && !still_upper) { /* between the ends' digits: any digits after */
            const char last = on_upper ? (char)(hi - 1) : hi;
            std::snprintf(buf, sizeof buf, x == last ? "\"%c\"" : "[%c-%c]", x, last);
            add(gpt2__string(buf) + " [0-9]*");
            x = last;
            continue;
        }
        const gpt2__string rest = gpt2__schema_fraction_from(f, i + 1, still_lower, still_upper, true);
        if (rest.empty()) continue;
        std::snprintf(buf, sizeof buf, "\"%c\" ", x);
        add(gpt2__string(buf) + gpt2__schema_add_rule(f.cv, rest));
    }
    return alts;
}

/* Appends to `out` the fraction (none, or "." and digits) between the ends' fractions; false
   when there is none. */
static bool gpt2__schema_fraction_digits(gpt2__schema_converter* cv, const gpt2__schema_end& lower, const gpt2__schema_end& upper, gpt2__string* out) {
    const gpt2__schema_fraction f{cv, &lower, &upper};
    const gpt2__string digits = gpt2__schema_fraction_from(f, 0, lower.present, upper.present, false);
    const bool may_be_none = gpt2__schema_fraction_may_stop(f, 0, lower.present, upper.present);
    if (digits.empty()) return may_be_none;
    const gpt2__string rule = gpt2__schema_add_rule(cv, digits);
    *out += may_be_none ? " (\".\" " + rule + ")?" : " \".\" " + rule;
    return true;
}

/* Magnitudes (a number without its sign, without an exponent) between `lower` (present, at
   least zero) and `upper` (absent: no bound), as alternatives appended to `alts`; false when
   there are none. */
static bool gpt2__schema_magnitudes(gpt2__schema_converter* cv, const gpt2__schema_end& lower, const gpt2__schema_end& upper, gpt2__string* alts) {
    const long long a = lower.at.whole, b = upper.at.whole;
    const size_t before = alts->size();
    auto add = [&](long long lo, long long hi, const gpt2__schema_end& frac_lower, const gpt2__schema_end& frac_upper) {
        gpt2__string e;
        gpt2__schema_natural_range(&e, lo, hi);
        if (!gpt2__schema_fraction_digits(cv, frac_lower, frac_upper, &e)) return;
        *alts += alts->size() == before ? "" : " | ";
        *alts += e;
    };
    const gpt2__schema_end none;
    if (upper.present && a == b) {
        add(a, a, lower, upper);
    } else if (!upper.present || a < b) {
        add(a, a, lower, none);
        if (!upper.present || a + 1 <= b - 1) add(a + 1, upper.present ? b - 1 : -1, none, none);
        if (upper.present) add(b, b, none, upper);
    }
    return alts->size() != before;
}

/* A number between the schema's bounds. Without bounds, JSON's number; with "minimum": 0
   alone, any number without a minus sign; with other bounds, the numbers written without an
   exponent between them, exactly (a grammar cannot compare 1e3 with 999 as it reads it). */
static gpt2_result gpt2__schema_number(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view pointer, gpt2__string* out, bool* impossible) {
    gpt2__schema_end lo, hi; /* the value's bounds, signed */
    GPT2__TRY(gpt2__schema_bounds(cv, view, &lo, &hi));
    if (!lo.present && !hi.present) {
        cv->used_number = true;
        *out = "number";
        return GPT2_OK;
    }
    if (lo.present && !lo.strict && lo.at.zero() && !hi.present) { /* the sign alone decides: exponents too ("-0" is zero) */
        *out = gpt2__schema_add_rule(cv, "((\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? | \"-0\" (\".\" \"0\"+)?) ([eE] [-+]? [0-9]+)?");
        return GPT2_OK;
    }
    gpt2__string alts;
    /* zero and above: magnitudes from max(lo, 0) to hi */
    if (!hi.present || !hi.at.negative) {
        gpt2__schema_end from = lo;
        if (!lo.present || lo.at.negative) from = gpt2__schema_end(), from.present = true;
        gpt2__schema_magnitudes(cv, from, hi, &alts);
    }
    /* "-" and magnitudes from max(-hi, 0) to -lo ("-0" is zero: in only where zero is) */
    if (!lo.present || lo.at.negative || lo.at.zero()) {
        gpt2__schema_end from, to = lo;
        from.present = true;
        if (hi.present && (hi.at.negative || hi.at.zero())) from = hi;
        from.at.negative = false;
        to.at.negative = false;
        gpt2__string negative;
        if (gpt2__schema_magnitudes(cv, from, to, &negative)) {
            alts += alts.empty() ? "" : " | ";
            alts += "\"-\" (" + negative + ")";
        }
    }
    if (alts.empty()) return gpt2__schema_contradiction(cv, pointer, "no number lies between minimum and maximum", impossible);
    *out = gpt2__schema_add_rule(cv, alts);
    return GPT2_OK;
}

/* multipleOf as a decimal fraction a / 10^b (0.5 is 5 / 10^1, 12 is 12 / 10^0). */
struct gpt2__schema_multiple {
    uint64_t a = 1;
    uint32_t b = 0;
};

enum { GPT2__SCHEMA_MAX_MULTIPLE_STATES = 2048, GPT2__SCHEMA_MAX_ENUMERATED = 1024 };

static uint64_t gpt2__gcd(uint64_t x, uint64_t y) {
    while (y) x %= y, std::swap(x, y);
    return x;
}

/* The view's multipleOf (several: their least common multiple), or the one of `key`
   (GPT2__KW_NOT_MULTIPLE). *present false where there is none. */
static gpt2_result gpt2__schema_multiple_of(gpt2__schema_converter* cv, const gpt2__schema_view& view, const char* key, gpt2__schema_multiple* m, bool* present) {
    *present = false;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, key)) {
        gpt2__schema_decimal d;
        if (!gpt2__schema_decimal_of(*kw->value, &d) || d.negative || d.zero())
            return gpt2__schema_refuse(cv, kw->pointer, "multipleOf must be a number greater than 0 with at most 18 digits before its point and 64 after");
        gpt2__schema_multiple x;
        x.b = (uint32_t)d.fraction.size();
        const gpt2__string digits = std::to_string(d.whole).c_str() + d.fraction;
        if (digits.size() > 15 || x.b > 12) return gpt2__schema_refuse(cv, kw->pointer, "'multipleOf' is enforced for values of at most 15 digits");
        x.a = std::strtoull(digits.c_str(), nullptr, 10);
        if (*present) { /* the least common multiple, over a common denominator */
            const uint32_t b = std::max(m->b, x.b);
            uint64_t p = m->a, q = x.a;
            for (uint32_t i = m->b; i < b; i++) p *= 10;
            for (uint32_t i = x.b; i < b; i++) q *= 10;
            const uint64_t g = gpt2__gcd(p, q);
            if (p / g > UINT64_C(1000000000000000) / q) return gpt2__schema_refuse(cv, kw->pointer, "'multipleOf's written together have a least common multiple too large to enforce");
            x.a = p / g * q, x.b = b;
            while (x.b > 0 && x.a % 10 == 0) x.a /= 10, x.b--;
        }
        *m = x;
        *present = true;
    }
    return GPT2_OK;
}

/* Whether the decimal d is a multiple of m: d * 10^b is a whole number that a divides. */
static bool gpt2__schema_is_multiple(const gpt2__schema_decimal& d, const gpt2__schema_multiple& m) {
    if (d.fraction.size() > m.b) return false;
    gpt2__string digits = std::to_string(d.whole).c_str() + d.fraction;
    digits.append(m.b - d.fraction.size(), '0');
    uint64_t r = 0;
    for (char c : digits) r = (r * 10 + (uint64_t)(c - '0')) % m.a;
    return r == 0;
}

/* The numbers written without an exponent that are multiples of m (or, negated, that are not),
   as a machine reading the digits: the remainder of the value times 10^b by a, and how many
   digits of the fraction were read. `integers`: without a fraction (or, where 1.0 is an
   integer, with zeros after the point). `no_sign`: zero and above. */
static gpt2_result gpt2__schema_multiples(gpt2__schema_converter* cv, const gpt2__schema_multiple& m, bool integers, bool negate, bool no_sign, const gpt2__schema_kw& where,
                                          gpt2__string* out, bool* impossible) {
    const uint64_t a = m.a;
    const uint32_t b = m.b;
    const bool fraction = !integers || cv->integer_fraction;
    if ((uint64_t)a * (fraction ? b + 3 : 1) > GPT2__SCHEMA_MAX_MULTIPLE_STATES) {
        char why[160];
        std::snprintf(why, sizeof why, "'multipleOf' is enforced where its digits make at most %d states (this one makes %llu)", (int)GPT2__SCHEMA_MAX_MULTIPLE_STATES,
                      (unsigned long long)(a * (fraction ? b + 3 : 1)));
        return gpt2__schema_refuse(cv, where.pointer, why);
    }
    if (negate && integers && a == 1) { /* every integer is a multiple */
        *impossible = true;
        return GPT2_OK;
    }
    uint64_t scale[40]; /* 10^k mod a */
    scale[0] = 1 % a;
    for (uint32_t k = 1; k < 40; k++) scale[k] = scale[k - 1] * 10 % a;
    auto accepts = [&](uint64_t r, uint32_t f) { return ((r * scale[b - std::min(f, b)]) % a == 0) != negate; };
    /* the states' rules: whole(r) after the integer part's digits (the first not 0), frac(j, r)
       after the point and j of the fraction's digits (j = b + 1: more than b, the rest zeros,
       which keep it a multiple), and `rest` after a digit that makes it no multiple (negated only) */
    const size_t levels = (size_t)b + 2;
    gpt2__vector<gpt2__string> whole(a), frac(levels * a);
    for (auto& n : whole) n = gpt2__schema_rule_name(cv);
    if (fraction)
        for (auto& n : frac) n = gpt2__schema_rule_name(cv);
    const gpt2__string rest = gpt2__schema_rule_name(cv);
    bool used_rest = false;
    /* digits from state remainder r with the next remainder (10r + d) mod a, grouped by target */
    auto digit_steps = [&](uint64_t r, char lowest, const gpt2__vector<gpt2__string>& to, size_t to_base, gpt2__string* body) {
        for (uint64_t target = 0; target < a; target++) {
            gpt2__string set;
            for (char d = lowest; d <= '9'; d++)
                if ((r * 10 + (uint64_t)(d - '0')) % a == target) set.push_back(d);
            if (set.empty()) continue;
            *body += body->empty() ? "" : " | ";
            *body += "[" + set + "] " + to[to_base + target];
        }
    };
    for (uint64_t r = 0; r < a; r++) {
        gpt2__string body;
        digit_steps(r, '0', whole, 0, &body);
        if (fraction) body += " | \".\" " + frac[r];
        if (accepts(r, 0)) body += " | \"\"";
        cv->rules += whole[r] + " ::= " + body + "\n";
    }
    for (size_t j = 0; fraction && j < levels; j++)
        for (uint64_t r = 0; r < a; r++) {
            gpt2__string body;
            if (j < b && !integers) digit_steps(r, '0', frac, (j + 1) * a, &body);
            else if (j < b) body = "\"0\" " + frac[(j + 1) * a + r * 10 % a];
            else body = "\"0\" " + frac[(size_t)(b + 1) * a + r];
            if (j >= b && negate && !integers) body += " | [1-9] " + rest, used_rest = true;
            if (j > 0 && accepts(r, (uint32_t)j)) body += " | \"\"";
            cv->rules += frac[j * a + r] + " ::= " + body + "\n";
        }
    if (used_rest) cv->rules += rest + " ::= [0-9]*\n";
    /* zero ("0", its fraction) and the others from their first digit */
    gpt2__string starts;
    if (fraction || accepts(0, 0)) {
        gpt2__string zero = fraction ? "\".\" " + frac[0] : gpt2__string();
        if (accepts(0, 0)) zero += zero.empty() ? "\"\"" : " | \"\"";
        starts = "\"0\" (" + zero + ")";
    }
    gpt2__string first;
    digit_steps(0, '1', whole, 0, &first);
    starts += (starts.empty() ? "" : " | ") + first;
    *out = gpt2__schema_add_rule(cv, (no_sign ? "" : "\"-\"? ") + gpt2__string("(") + starts + ")");
    return GPT2_OK;
}

/* The multiples of m between two bounds, each value as a literal, where they are at most
   GPT2__SCHEMA_MAX_ENUMERATED; false where there would be more (or the bounds are too large). */
static bool gpt2__schema_enumerate_multiples(const gpt2__schema_multiple& m, const gpt2__schema_end& lower, const gpt2__schema_end& upper, bool integers,
                                             gpt2__vector<gpt2__string>* values) {
    /* each bound times 10^b / a, rounded inward: k from k_lo to k_hi */
    auto scaled = [&](const gpt2__schema_decimal& d, bool up, bool strict, long long* k) {
        if (d.whole > 999999999999LL || m.b > 6) return false;
        long long v = d.whole;
        for (uint32_t i = 0; i < m.b; i++) v = v * 10 + (i < d.fraction.size() ? d.fraction[i] - '0' : 0);
        const bool inexact = d.fraction.size() > m.b && d.fraction.find_first_not_of('0', m.b) != gpt2__string::npos;
        /* the signed value times 10^b lies in [v, v + 1) in magnitude */
        const long long a = (long long)m.a;
        long long q;
        if (!d.negative) {
            q = up ? (v + a - 1 + (inexact ? 1 : 0)) / a : v / a; /* ceil or floor of (v or a bit more) / a */
            if (up && !inexact && v % a == 0 && strict) q++;
            if (!up && !inexact && v % a == 0 && strict) q--;
        } else {
            q = up ? -(v / a) : -((v + a - 1 + (inexact ? 1 : 0)) / a);
            if (up && !inexact && v % a == 0 && strict) q++;
            if (!up && !inexact && v % a == 0 && strict) q--;
        }
        *k = q;
        return true;
    };
    long long k_lo, k_hi;
    if (!lower.present || !upper.present || !scaled(lower.at, true, lower.strict, &k_lo) || !scaled(upper.at, false, upper.strict, &k_hi)) return false;
    if (k_hi - k_lo >= GPT2__SCHEMA_MAX_ENUMERATED) return false;
    for (long long k = k_lo; k <= k_hi; k++) {
        const long long v = k * (long long)m.a; /* the value times 10^b */
        gpt2__string digits = std::to_string(v < 0 ? -v : v).c_str();
        if (digits.size() <= m.b) digits.insert(0, m.b + 1 - digits.size(), '0');
        gpt2__string text = (v < 0 ? "-" : "") + digits.substr(0, digits.size() - m.b);
        gpt2__string frac = digits.substr(digits.size() - m.b);
        frac.erase(frac.find_last_not_of('0') + 1);
        if (!frac.empty()) {
            if (integers) continue;
            text += "." + frac;
        }
        values->push_back(text);
    }
    return true;
}

/* A number or an integer (`integers`) of the view: its bounds, multipleOf (and the complements'
   GPT2__KW_NOT_MULTIPLE and GPT2__KW_FRACTION). */
static gpt2_result gpt2__schema_numeric(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view pointer, bool integers, gpt2__string* out, bool* impossible) {
    gpt2__schema_multiple m, not_m;
    bool multiple = false, not_multiple = false;
    GPT2__TRY(gpt2__schema_multiple_of(cv, view, "multipleOf", &m, &multiple));
    const gpt2__vector<const gpt2__schema_kw*> not_multiples = gpt2__schema_all(view, GPT2__KW_NOT_MULTIPLE);
    if (not_multiples.size() > 1) /* not a multiple of a nor of b is not "not a multiple of their least common multiple" */
        return gpt2__schema_refuse(cv, not_multiples[1]->pointer, "the complements of two 'multipleOf' at once are not enforced");
    GPT2__TRY(gpt2__schema_multiple_of(cv, view, GPT2__KW_NOT_MULTIPLE, &not_m, &not_multiple));
    const gpt2__schema_kw* fraction = gpt2__schema_find(view, GPT2__KW_FRACTION);
    gpt2__schema_end lower, upper;
    GPT2__TRY(gpt2__schema_bounds(cv, view, &lower, &upper));
    const bool bounded = lower.present || upper.present;
    if (fraction) { /* numbers that are no integers, written without an exponent: alone only (else none: fewer values) */
        if (integers || bounded || multiple || not_multiple) *impossible = true;
        else *out = gpt2__schema_add_rule(cv, "\"-\"? (\"0\" | [1-9] [0-9]*) \".\" [0-9]* [1-9] [0-9]*");
        return GPT2_OK;
    }
    if (!multiple && !not_multiple) return integers ? gpt2__schema_integer(cv, view, pointer, out, impossible) : gpt2__schema_number(cv, view, pointer, out, impossible);
    const gpt2__schema_kw& where = *gpt2__schema_find(view, multiple ? "multipleOf" : GPT2__KW_NOT_MULTIPLE);
    if (multiple && not_multiple) return gpt2__schema_refuse(cv, where.pointer, "'multipleOf' beside the complement of another is not enforced");
    const bool from_zero = lower.present && lower.at.zero() && !lower.strict && !upper.present;
    if (!bounded || from_zero) return gpt2__schema_multiples(cv, multiple ? m : not_m, integers, not_multiple, from_zero, where, out, impossible);
    gpt2__vector<gpt2__string> values;
    if (not_multiple || !gpt2__schema_enumerate_multiples(m, lower, upper, integers, &values))
        return gpt2__schema_refuse(cv, where.pointer, "'multipleOf' beside minimum or maximum is enforced where the bounds hold at most 1024 multiples, or the minimum is 0 alone");
    if (values.empty()) {
        *impossible = true;
        return GPT2_OK;
    }
    gpt2__string alts;
    for (const gpt2__string& v : values) {
        gpt2__json j;
        j.kind = GPT2__JSON_NUMBER;
        j.text = v;
        alts += alts.empty() ? "" : " | ";
        gpt2__schema_number_literal(&alts, j, integers && cv->draft4);
    }
    *out = gpt2__schema_add_rule(cv, alts);
    return GPT2_OK;
}

/* The helper rules a format's body uses, written once into a grammar that uses them
   (gpt2__schema_format_helpers). */
enum : unsigned { GPT2__FORMAT_DATETIME = 1, GPT2__FORMAT_HOST = 2, GPT2__FORMAT_EMAIL = 4, GPT2__FORMAT_URI = 8, GPT2__FORMAT_IPV6 = 16 };

struct gpt2__schema_format_rule {
    const char* name;
    const char* body; /* the string's JSON text, quotes included: none of these needs an escape */
    unsigned helpers;
};

/* The formats a grammar holds. date, time, date-time (RFC 3339), uuid (RFC 4122), ipv4 and ipv6
   exactly, stricter where exactness would cost much (February has 28 days, no leap second). The
   others are subsets every validator accepts: hostname and email's domain 1 to 3 labels of at
   most 62 characters, the last starting with a letter (so no all-numeric top-level name), within
   RFC 1034's 253; email's local part dot-atoms (RFC 5321) of at most 4 words of 15, 254
   characters in all at most; uri (RFC 3986) without userinfo or an IP-literal host,
   uri-reference that or a relative reference. */
static const gpt2__schema_format_rule gpt2__schema_formats[] = {
    {"date", "\"\\\"\" fdate \"\\\"\"", GPT2__FORMAT_DATETIME},
    {"time", "\"\\\"\" ftime \"\\\"\"", GPT2__FORMAT_DATETIME},
    {"date-time", "\"\\\"\" fdate \"T\" ftime \"\\\"\"", GPT2__FORMAT_DATETIME},
    {"uuid", "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12} \"\\\"\"", 0},
    {"ipv4", "\"\\\"\" fbyte \".\" fbyte \".\" fbyte \".\" fbyte \"\\\"\"", GPT2__FORMAT_HOST},
    /* RFC 3986's IPv6address: 8 groups, or fewer around one "::", the last two maybe an IPv4 address */
    {"ipv6",
     "\"\\\"\" ((fh16 \":\"){6} fls32 | \"::\" (fh16 \":\"){5} fls32 | fh16? \"::\" (fh16 \":\"){4} fls32 | ((fh16 \":\")? fh16)? \"::\" (fh16 \":\"){3} fls32 | "
     "((fh16 \":\"){0,2} fh16)? \"::\" (fh16 \":\"){2} fls32 | ((fh16 \":\"){0,3} fh16)? \"::\" fh16 \":\" fls32 | ((fh16 \":\"){0,4} fh16)? \"::\" fls32 | "
     "((fh16 \":\"){0,5} fh16)? \"::\" fh16 | ((fh16 \":\"){0,6} fh16)? \"::\") \"\\\"\"",
     GPT2__FORMAT_HOST | GPT2__FORMAT_IPV6},
    {"hostname", "\"\\\"\" (flabel \".\"){0,2} ftld \"\\\"\"", GPT2__FORMAT_HOST},
    {"email", "\"\\\"\" fatom (\".\" fatom){0,3} \"@\" (flabel \".\"){1,2} ftld \"\\\"\"", GPT2__FORMAT_HOST | GPT2__FORMAT_EMAIL},
    {"uri", "\"\\\"\" furi \"\\\"\"", GPT2__FORMAT_URI},
    {"uri-reference", "\"\\\"\" (furi | (fauthority | \"/\" (fpchar+ fpath)? | fnocolon+ fpath)? fafter) \"\\\"\"", GPT2__FORMAT_URI}};

static const gpt2__schema_format_rule* gpt2__schema_format(std::string_view name) {
    for (const auto& f : gpt2__schema_formats)
        if (name == f.name) return &f;
    return nullptr;
}

/* "date, time, ... and uri-reference": the formats of the table, for the refusal of the others. */
static gpt2__string gpt2__schema_format_names() {
    gpt2__string names;
    const size_t n = std::size(gpt2__schema_formats);
    for (size_t i = 0; i < n; i++) (names += i == 0 ? "" : i + 1 < n ? ", " : " and ") += gpt2__schema_formats[i].name;
    return names;
}

/* The helper rules of the formats whose bits are in `used`. */
static void gpt2__schema_format_helpers(unsigned used, gpt2__string* gbnf) {
    if (used & GPT2__FORMAT_DATETIME) {
        *gbnf += "fdate ::= ([1-9] [0-9]{3} | \"0\" [1-9] [0-9]{2} | \"00\" [1-9] [0-9] | \"000\" [1-9]) \"-\" ((\"01\" | \"03\" | \"05\" | \"07\" | \"08\" | \"10\" | \"12\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
                 "(\"04\" | \"06\" | \"09\" | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02\" \"-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))" "\n";
        *gbnf += "ftime ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? (\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])" "\n";
    }
    if (used & GPT2__FORMAT_HOST) {
        *gbnf += "fbyte ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]" "\n";
        /* a label of 1 to 62 characters, not "--" at its third and fourth (an IDNA A-label, "xn--",
           or a reserved prefix: left out, as a validator may check its Punycode) */
        *gbnf += "flabel ::= [A-Za-z0-9] flabelrest" "\n";
        *gbnf += "ftld ::= [A-Za-z] flabelrest" "\n";
        *gbnf += "flabelrest ::= ([A-Za-z0-9] | [A-Za-z0-9-] [A-Za-z0-9] | [A-Za-z0-9-] [A-Za-z0-9-] [A-Za-z0-9] | "
                 "[A-Za-z0-9-] ([A-Za-z0-9] [A-Za-z0-9-] | \"-\" [A-Za-z0-9]) [A-Za-z0-9-]{0,57} [A-Za-z0-9])?" "\n";
    }
    if (used & GPT2__FORMAT_IPV6) {
        *gbnf += "fh16 ::= [0-9a-fA-F]{1,4}" "\n";
        *gbnf += "fls32 ::= fh16 \":\" fh16 | fbyte \".\" fbyte \".\" fbyte \".\" fbyte" "\n";
    }
    if (used & GPT2__FORMAT_EMAIL) *gbnf += "fatom ::= [A-Za-z0-9!#$%&'*+/=?^_`{|}~-]{1,15}" "\n";
    if (used & GPT2__FORMAT_URI) {
        /* RFC 3986's pchar, a path of segments, an authority without userinfo, the query and fragment */
        *gbnf += "fpchar ::= [A-Za-z0-9._~!$&'()*+,;=:@-] | \"%\" [0-9A-Fa-f]{2}" "\n";
        *gbnf += "fnocolon ::= [A-Za-z0-9._~!$&'()*+,;=@-] | \"%\" [0-9A-Fa-f]{2}" "\n";
        *gbnf += "fpath ::= (\"/\" fpchar*)*" "\n";
        *gbnf += "fauthority ::= \"//\" ([A-Za-z0-9._~!$&'()*+,;=-] | \"%\" [0-9A-Fa-f]{2})* (\":\" [0-9]*)? fpath" "\n";
        *gbnf += "fafter ::= (\"?\" (fpchar | [/?])*)? (\"#\" (fpchar | [/?])*)?" "\n";
        *gbnf += "furi ::= [A-Za-z] [A-Za-z0-9+.-]* \":\" (fauthority | \"/\" (fpchar+ fpath)? | fpchar+ fpath)? fafter" "\n";
    }
}

/* The formats JSON Schema defines (draft 2020-12's, and the older drafts' names): one the
   grammar does not hold is refused. A name no draft defines ("int32", "slug") is an annotation,
   as validators read it. */
static bool gpt2__schema_format_defined(std::string_view name) {
    static const char* const names[] = {"date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4",
                                        "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
                                        "relative-json-pointer", "regex", "host-name", "ip-address", "utc-millisec", "color", "style", "phone"};
    for (const char* n : names)
        if (name == n) return true;
    return false;
}

/* The rule of a JSON string whose contents `regex` matches (as `pattern` reads it); a regex
   outside the subset is refused at `pointer`, naming `keyword` ("pattern", "patternProperties"). */
static gpt2_result gpt2__schema_pattern_string(gpt2__schema_converter* cv, const gpt2__string& regex, std::string_view pointer, const char* keyword, gpt2__string* out) {
    gpt2__string contents;
    if (const char* why = gpt2__regex_to_gbnf(regex, "char", &contents)) {
        char msg[160];
        std::snprintf(msg, sizeof msg, "'%s' is not enforced: %s", keyword, why);
        return gpt2__schema_refuse(cv, pointer, msg);
    }
    cv->used_char = true;
    *out = gpt2__schema_add_rule(cv, "\"\\\"\" " + contents + " \"\\\"\"");
    return GPT2_OK;
}

static void gpt2__schema_other_key(gpt2__schema_converter* cv, const gpt2__vector<gpt2__string>& names, size_t at, gpt2__string* out);

/* The one value of a keyword written one or more times (pattern, format): a second, different one
   is refused (two patterns at once are not enforced). */
static gpt2_result gpt2__schema_single(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view key, const gpt2__schema_kw** out) {
    *out = nullptr;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, key)) {
        if (*out && !((*out)->value->kind == GPT2__JSON_STRING && kw->value->kind == GPT2__JSON_STRING && (*out)->value->text == kw->value->text)) {
            char why[160];
            std::snprintf(why, sizeof why, "'%.*s' is written here and at %s with another value; both at once are not enforced", (int)key.size(), key.data(), (*out)->pointer.c_str());
            return gpt2__schema_refuse(cv, kw->pointer, why);
        }
        if (!*out) *out = kw;
    }
    return GPT2_OK;
}

static gpt2_result gpt2__schema_string(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__string* out, bool* impossible) {
    uint32_t lo = 0, hi = 0;
    bool has_lo = false, has_hi = false;
    const gpt2__schema_kw *min_kw = nullptr, *max_kw = nullptr, *format, *pattern;
    GPT2__TRY(gpt2__schema_count(cv, view, "minLength", true, &lo, &has_lo, &min_kw));
    GPT2__TRY(gpt2__schema_count(cv, view, "maxLength", false, &hi, &has_hi, &max_kw));
    GPT2__TRY(gpt2__schema_single(cv, view, "format", &format));
    GPT2__TRY(gpt2__schema_single(cv, view, "pattern", &pattern));
    if (format && format->value->kind == GPT2__JSON_STRING && !gpt2__schema_format_defined(format->value->text)) format = nullptr;
    /* strings that are none of some values (a complement of enum or const), written without escapes */
    gpt2__vector<gpt2__string> excluded;
    const gpt2__schema_kw* not_in = nullptr;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, GPT2__KW_NOT_IN)) {
        not_in = kw;
        if (kw->value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw->pointer, "expected an array of strings");
        for (const auto& v : kw->value->items)
            if (v.kind == GPT2__JSON_STRING) excluded.push_back(v.text);
    }
    if (has_lo && has_hi && lo > hi) return gpt2__schema_contradiction(cv, max_kw->pointer, "maxLength is less than minLength", impossible);
    if (not_in) {
        if (const gpt2__schema_kw* other = pattern ? pattern : format ? format : min_kw ? min_kw : max_kw)
            return gpt2__schema_refuse(cv, other->pointer, "a complement of string values (not, oneOf, if) beside a length, a pattern or a format is not enforced");
        gpt2__string rest;
        gpt2__schema_other_key(cv, excluded, 0, &rest);
        cv->used_char = true;
        *out = gpt2__schema_add_rule(cv, "\"\\\"\" " + rest);
        return GPT2_OK;
    }
    if (pattern) {
        if (pattern->value->kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, pattern->pointer, "'pattern' must be a string");
        if (const gpt2__schema_kw* other = min_kw ? min_kw : max_kw ? max_kw : format)
            return gpt2__schema_refuse(cv, other->pointer, "a length or a format beside 'pattern' is not enforced");
        return gpt2__schema_pattern_string(cv, pattern->value->text, pattern->pointer, "pattern", out);
    }
    if (format) {
        const gpt2__schema_format_rule* rule = format->value->kind == GPT2__JSON_STRING ? gpt2__schema_format(format->value->text) : nullptr;
        if (!rule)
            return gpt2__schema_refuse(cv, format->pointer,
                                       ("'format' is enforced only for " + gpt2__schema_format_names() + " (formats no draft defines are annotations)").c_str());
        if (min_kw || max_kw) return gpt2__schema_refuse(cv, (min_kw ? min_kw : max_kw)->pointer, "a length beside 'format' is not enforced");
        cv->used_formats |= rule->helpers;
        *out = gpt2__schema_add_rule(cv, rule->body);
        return GPT2_OK;
    }
    if (!has_lo && !has_hi) {
        cv->used_string = true;
        *out = "string";
        return GPT2_OK;
    }
    cv->used_char = true;
    char body[96];
    if (has_hi) std::snprintf(body, sizeof body, "\"\\\"\" char{%u,%u} \"\\\"\"", lo, hi);
    else std::snprintf(body, sizeof body, "\"\\\"\" char{%u,} \"\\\"\"", lo);
    *out = gpt2__schema_add_rule(cv, body);
    return GPT2_OK;
}

/* The rest of a key (after the code points the names share before `at`) and its closing quote,
   such that the whole key is none of `names`; written without escapes, so that no escape spells
   a known key. A rule per node of the names' trie. */
static void gpt2__schema_other_key(gpt2__schema_converter* cv, const gpt2__vector<gpt2__string>& names, size_t at, gpt2__string* out) {
    bool ends_here = false;
    gpt2__vector<std::pair<uint32_t, gpt2__vector<gpt2__string>>> next;
    for (const auto& name : names) {
        if (name.size() == at) {
            ends_here = true;
            continue;
        }
        const unsigned char c = (unsigned char)name[at];
        const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
        for (size_t i = 1; i < len && at + i < name.size(); i++) cp = cp << 6 | ((unsigned char)name[at + i] & 0x3F);
        if (cp < 0x20 || cp == '"' || cp == '\\') continue; /* not writable without an escape */
        size_t k = 0;
        while (k < next.size() && next[k].first != cp) k++;
        if (k == next.size()) next.emplace_back(cp, gpt2__vector<gpt2__string>());
        next[k].second.push_back(name);
    }
    gpt2__string body;
    if (!ends_here) body = "\"\\\"\"";
    char buf[32];
    gpt2__string diverge = "[^\"\\\\\\x00-\\x1F";
    for (const auto& branch : next) {
        std::snprintf(buf, sizeof buf, "\\U%08X", (unsigned)branch.first);
        diverge += buf;
        const size_t len = branch.first < 0x80 ? 1 : branch.first < 0x800 ? 2 : branch.first < 0x10000 ? 3 : 4;
        gpt2__string child;
        gpt2__schema_other_key(cv, branch.second, at + len, &child);
        if (!body.empty()) body += " | ";
        std::snprintf(buf, sizeof buf, "[\\U%08X] ", (unsigned)branch.first);
        body += buf;
        body += child;
    }
    diverge += "] keychar* \"\\\"\"";
    if (!body.empty()) body += " | ";
    body += diverge;
    *out = gpt2__schema_add_rule(cv, body);
}

/* The string values a oneOf branch allows for property `name`, when the branch is `"type":
   "object"` with `name` required and its schema a string const or an enum of strings (read in
   the branch, or in its $ref's target when the branch has no properties of its own). */
static bool gpt2__schema_tag_values(gpt2__schema_converter* cv, const gpt2__json& branch, std::string_view pointer, std::string_view name, gpt2__vector<gpt2__string>* values) {
    const gpt2__json* b = &branch;
    if (b->kind != GPT2__JSON_OBJECT) return false;
    if (!b->get("properties") && b->get("$ref")) {
        gpt2__schema_kw ref{"$ref", b->get("$ref"), gpt2__string(pointer) + "/$ref"};
        gpt2__string target_pointer;
        gpt2_error quiet{};
        gpt2_error* err = cv->err;
        cv->err = &quiet; /* a ref that does not resolve is reported where it is converted */
        const gpt2_result res = gpt2__schema_resolve(cv, ref, &b, &target_pointer);
        cv->err = err;
        if (res != GPT2_OK || b->kind != GPT2__JSON_OBJECT) return false;
    }
    /* beside a $ref, draft 7 ignores the keywords that would tell the branches apart */
    if (b->get("$ref")) return false;
    const gpt2__json* type = b->get("type");
    const gpt2__json* required = b->get("required");
    const gpt2__json* props = b->get("properties");
    if (!type || type->kind != GPT2__JSON_STRING || type->text != "object" || !required || required->kind != GPT2__JSON_ARRAY || !props || props->kind != GPT2__JSON_OBJECT) return false;
    bool is_required = false;
    for (const auto& r : required->items) is_required |= r.kind == GPT2__JSON_STRING && std::string_view(r.text) == name;
    const gpt2__json* prop = props->get(name);
    if (!is_required || !prop || prop->kind != GPT2__JSON_OBJECT) return false;
    values->clear();
    if (const gpt2__json* c = prop->get("const")) {
        if (c->kind != GPT2__JSON_STRING) return false;
        values->push_back(c->text);
    } else if (const gpt2__json* e = prop->get("enum")) {
        if (e->kind != GPT2__JSON_ARRAY) return false;
        for (const auto& v : e->items) {
            if (v.kind != GPT2__JSON_STRING) return false;
            values->push_back(v.text);
        }
    } else {
        return false;
    }
    return true;
}

/* Whether no value can match two of oneOf's branches because each is an object whose required
   property `name` takes string values no other branch allows (a tagged union). */
static bool gpt2__schema_discriminated(gpt2__schema_converter* cv, const gpt2__schema_kw& one_of) {
    const gpt2__json& branches = *one_of.value;
    if (branches.items.empty() || branches.items[0].kind != GPT2__JSON_OBJECT) return false;
    const gpt2__json* first = &branches.items[0];
    gpt2__vector<gpt2__string> candidates;
    for (int hop = 0; hop < 2 && first && first->kind == GPT2__JSON_OBJECT; hop++) {
        if (const gpt2__json* props = first->get("properties")) {
            for (const auto& k : props->keys) candidates.push_back(k);
            break;
        }
        const gpt2__json* ref = first->get("$ref");
        if (!ref) break;
        gpt2__schema_kw kw{"$ref", ref, one_of.pointer + "/0/$ref"};
        gpt2__string target_pointer;
        gpt2_error quiet{};
        gpt2_error* err = cv->err;
        cv->err = &quiet;
        const gpt2_result res = gpt2__schema_resolve(cv, kw, &first, &target_pointer);
        cv->err = err;
        if (res != GPT2_OK) return false;
    }
    for (const auto& name : candidates) {
        gpt2__vector<gpt2__string> all, values;
        bool ok = true;
        for (size_t i = 0; i < branches.items.size() && ok; i++) {
            char index[24];
            std::snprintf(index, sizeof index, "/%zu", i);
            ok = gpt2__schema_tag_values(cv, branches.items[i], one_of.pointer + index, name, &values);
            for (size_t v = 0; ok && v < values.size(); v++) {
                ok = std::find(all.begin(), all.end(), values[v]) == all.end();
                all.push_back(values[v]);
            }
        }
        if (ok) return true;
    }
    return false;
}

/* Whether no value can match two of oneOf's branches because each allows only the values of
   its `const` or `enum` (strings, numbers, booleans, null) and no two branches share one
   ("oneOf": [{"const": "auto"}, {"const": "lf"}]). */
static bool gpt2__schema_disjoint_values(const gpt2__json& branches) {
    gpt2__vector<gpt2__string> taken; /* each value as a kind letter and its text */
    for (const auto& b : branches.items) {
        if (b.kind != GPT2__JSON_OBJECT) return false;
        gpt2__vector<const gpt2__json*> values;
        if (const gpt2__json* c = b.get("const")) values.push_back(c);
        else if (const gpt2__json* e = b.get("enum"); e && e->kind == GPT2__JSON_ARRAY)
            for (const auto& v : e->items) values.push_back(&v);
        if (values.empty()) return false;
        const size_t before = taken.size();
        for (const gpt2__json* v : values) {
            gpt2__string key;
            if (v->kind == GPT2__JSON_STRING) key = "s" + v->text;
            else if (v->kind == GPT2__JSON_BOOL) key = v->boolean ? "t" : "f";
            else if (v->kind == GPT2__JSON_NULL) key = "n";
            else if (gpt2__schema_decimal d; v->kind == GPT2__JSON_NUMBER && gpt2__schema_decimal_of(*v, &d)) /* 2, 2.0 and 2e0 alike */
                key = "d" + gpt2__schema_decimal_text(d);
            else return false; /* arrays, objects, numbers too long to compare */
            if (std::find(taken.begin(), taken.begin() + (ptrdiff_t)before, key) != taken.begin() + (ptrdiff_t)before) return false;
            taken.push_back(key);
        }
    }
    return true;
}

/* One of several schemas that all hold for one value (a property several schemas name, the
   items of a tuple and of the items after it), with where it is written. */
struct gpt2__schema_part {
    const gpt2__json* schema;
    gpt2__string pointer;
    bool evaluates = true;
    bool made = false; /* a schema the converter made (gpt2__schema_kw::made) */
};

/* The expression of the values every part holds for (none: any value), or *impossible. Parts of
   different schemas are merged as allOf's are, a level down, so that an unevaluatedProperties of
   one does not count another's properties as its own. */
static gpt2_result gpt2__schema_all_expr(gpt2__schema_converter* cv, const gpt2__vector<gpt2__schema_part>& parts, gpt2__string* out, bool* impossible, int depth) {
    *impossible = false;
    if (parts.size() == 1 && parts[0].evaluates && !parts[0].made) return gpt2__schema_expr(cv, *parts[0].schema, parts[0].pointer, out, impossible, depth + 1);
    gpt2__schema_view view;
    for (const gpt2__schema_part& p : parts) {
        if (p.schema->kind == GPT2__JSON_BOOL) {
            if (p.schema->boolean) continue;
            *impossible = true;
            return GPT2_OK;
        }
        if (p.schema->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, p.pointer, "a schema must be an object or a boolean");
        gpt2__schema_view_of(*p.schema, p.pointer, &view, parts.size() > 1 ? 1 : 0, p.evaluates, p.made);
    }
    if (view.empty()) { /* each of them true */
        cv->used_value = true;
        *out = "value";
        return GPT2_OK;
    }
    return gpt2__schema_view_expr(cv, std::move(view), parts[0].pointer, out, impossible, depth + 1);
}

/* Whether `name` is one of the schema's strings (an enum's or const's), for propertyNames: 1 yes,
   0 no, -1 the schema is not of that form (or allows no string: 0). */
static int gpt2__schema_name_allowed(const gpt2__json& names, std::string_view name) {
    if (names.kind == GPT2__JSON_BOOL) return names.boolean ? 1 : 0;
    if (names.kind != GPT2__JSON_OBJECT) return -1;
    bool has_values = false, found = false;
    for (size_t i = 0; i < names.keys.size(); i++) {
        const gpt2__json& v = names.items[i];
        if (names.keys[i] == "const") has_values = true, found = found || (v.kind == GPT2__JSON_STRING && v.text == name);
        else if (names.keys[i] == "enum" && v.kind == GPT2__JSON_ARRAY) {
            has_values = true;
            for (const auto& e : v.items) found = found || (e.kind == GPT2__JSON_STRING && e.text == name);
        } else if (names.keys[i] == "maxLength" || names.keys[i] == "minLength") {
            gpt2__schema_decimal d;
            if (!gpt2__schema_decimal_of(v, &d) || !d.fraction.empty() || d.negative) return -1;
            const long long n = (long long)gpt2__utf8_code_points(name);
            if (names.keys[i] == "maxLength" ? n > d.whole : n < d.whole) return 0;
        } else if (gpt2__schema_known(names.keys[i]) && names.keys[i] != "type") {
            return -1;
        }
    }
    if (const gpt2__json* t = names.get("type")) {
        bool string = t->kind == GPT2__JSON_STRING && t->text == "string";
        if (t->kind == GPT2__JSON_ARRAY)
            for (const auto& x : t->items) string = string || (x.kind == GPT2__JSON_STRING && x.text == "string");
        if (!string) return 0;
    }
    return has_values ? found : 1;
}

/* An object's members: where they go and what they are. */
struct gpt2__schema_member {
    gpt2__string kv; /* the key, ':' and the value's rule, with whitespace */
    bool required;
};

enum { GPT2__SCHEMA_MAX_OBJECT_STATES = 1 << 14, GPT2__SCHEMA_MAX_ANY_ORDER_STATES = 1 << 10 };

/* The members in the order given (each may be absent unless required), then any number of
   extras (extra_kv, where not empty), with at most max_count members in all and at least
   min_count distinct keys (the extras count one at most: two may be one key written twice, which
   a JSON reader keeps once): a rule per member position and count written so far (capped where
   more makes no difference), the first written without a comma. false where no object is possible. */
static gpt2_result gpt2__schema_members_in_order(gpt2__schema_converter* cv, const gpt2__vector<gpt2__schema_member>& list, const gpt2__string& extra_kv,
                                                 uint32_t min_count, uint32_t max_count, gpt2__string* body, bool* possible, const gpt2__schema_kw* where) {
    const char* ws = gpt2__schema_ws(cv);
    const size_t n = list.size();
    const bool bounded = max_count != UINT32_MAX;
    const size_t cap = bounded ? max_count : std::max<uint32_t>(min_count, 1); /* counts past it: as it */
    if ((n + 1) * (cap + 1) > GPT2__SCHEMA_MAX_OBJECT_STATES)
        return gpt2__schema_refuse(cv, where ? where->pointer : "(root)", "minProperties or maxProperties with these properties would need too many rules");
    gpt2__vector<gpt2__string> rule((n + 1) * (cap + 1)); /* empty: no object completes from there */
    char buf[64];
    for (size_t i = n + 1; i-- > 0;)
        for (size_t c = 0; c <= cap; c++) {
            const char* comma = c > 0 ? "\",\" " : "";
            gpt2__string alts;
            auto add = [&](const gpt2__string& a) { alts += alts.empty() ? "" : " | ", alts += a; };
            if (i == n) {
                /* e more extras: c + e at most max_count, and c + (e > 0) at least min_count (two
                   extras may be one key written twice, which a JSON reader keeps once) */
                const uint32_t least = c >= min_count ? 0 : (uint32_t)(min_count - c);
                if (least > 1) continue;
                const bool any_more = !bounded;
                const uint32_t most = bounded ? (uint32_t)(max_count - std::min<size_t>(c, max_count)) : 0;
                if (least == 0) add("\"\"");
                if (!extra_kv.empty() && (any_more || most > 0)) {
                    if (c > 0) {
                        if (any_more) std::snprintf(buf, sizeof buf, "{%u,}", least ? least : 1);
                        else std::snprintf(buf, sizeof buf, "{%u,%u}", least ? least : 1, most);
                        add("(\",\" " + gpt2__string(ws) + " " + extra_kv + ")" + buf);
                    } else {
                        const uint32_t l = least ? least - 1 : 0;
                        if (any_more) std::snprintf(buf, sizeof buf, "{%u,}", l);
                        else std::snprintf(buf, sizeof buf, "{%u,%u}", l, most - 1);
                        add(extra_kv + " (\",\" " + gpt2__string(ws) + " " + extra_kv + ")" + buf);
                    }
                }
            } else {
                const size_t next = std::min(c + 1, cap);
                if ((!bounded || c + 1 <= max_count) && !rule[(i + 1) * (cap + 1) + next].empty())
                    add(gpt2__string(comma) + (c > 0 ? gpt2__string(ws) + " " : "") + list[i].kv + " " + rule[(i + 1) * (cap + 1) + next]);
                if (!list[i].required && !rule[(i + 1) * (cap + 1) + c].empty()) add(rule[(i + 1) * (cap + 1) + c]);
            }
            if (!alts.empty()) rule[i * (cap + 1) + c] = gpt2__schema_add_rule(cv, alts);
        }
    *possible = !rule[0].empty();
    *body = rule[0];
    return GPT2_OK;
}

/* The members in any order, each at most once, the required ones all, extras anywhere among
   them: a rule per set of members written and count of extras (2^n sets: for a few members only).
   Extras count for maxProperties as written, and for minProperties as one at most (two extras
   may be one key written twice, which a JSON reader keeps once). */
static void gpt2__schema_members_any_order(gpt2__schema_converter* cv, const gpt2__vector<gpt2__schema_member>& list, const gpt2__string& extra_kv,
                                           uint32_t min_count, uint32_t max_count, gpt2__string* body, bool* possible) {
    const char* ws = gpt2__schema_ws(cv);
    const size_t n = list.size(), sets = (size_t)1 << n;
    const bool bounded = max_count != UINT32_MAX;
    const size_t cap = bounded ? max_count : 1; /* extras written, as far as they matter */
    uint32_t required = 0;
    for (size_t i = 0; i < n; i++) required |= list[i].required ? 1u << i : 0;
    auto members = [](size_t set) {
        size_t k = 0;
        for (; set; set &= set - 1) k++;
        return k;
    };
    auto at = [&](size_t set, size_t e) { return set * (cap + 1) + e; };
    auto may_end = [&](size_t set, size_t e) { return (set & required) == required && members(set) + std::min<size_t>(e, 1) >= min_count; };
    auto room = [&](size_t set, size_t e) { return !bounded || members(set) + e + 1 <= max_count; };
    /* live states found from the end: a state lives when it may end or steps to a living one */
    gpt2__vector<char> live(sets * (cap + 1), 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t set = sets; set-- > 0;)
            for (size_t e = 0; e <= cap; e++) {
                char& l = live[at(set, e)];
                if (l) continue;
                bool any = may_end(set, e);
                for (size_t i = 0; i < n && !any && room(set, e); i++)
                    if (!(set >> i & 1)) any = live[at(set | (size_t)1 << i, e)];
                if (!any && room(set, e) && !extra_kv.empty()) any = live[at(set, std::min(e + 1, cap))];
                if (any) l = 1, changed = true;
            }
    }
    gpt2__vector<gpt2__string> name(sets * (cap + 1));
    for (size_t k = 0; k < name.size(); k++)
        if (live[k]) name[k] = gpt2__schema_rule_name(cv);
    for (size_t set = 0; set < sets; set++)
        for (size_t e = 0; e <= cap; e++) {
            if (!live[at(set, e)]) continue;
            const gpt2__string comma = members(set) + e > 0 ? "\",\" " + gpt2__string(ws) + " " : gpt2__string();
            gpt2__string alts;
            auto add = [&](const gpt2__string& a) { alts += alts.empty() ? "" : " | ", alts += a; };
            for (size_t i = 0; i < n && room(set, e); i++)
                if (!(set >> i & 1) && live[at(set | (size_t)1 << i, e)]) add(comma + list[i].kv + " " + name[at(set | (size_t)1 << i, e)]);
            const size_t more = at(set, std::min(e + 1, cap));
            if (room(set, e) && !extra_kv.empty() && live[more]) add(comma + extra_kv + " " + name[more]);
            if (may_end(set, e)) add("\"\"");
            cv->rules += name[at(set, e)] + " ::= " + alts + "\n";
        }
    *possible = live[0] != 0;
    *body = name[0];
}

static gpt2_result gpt2__schema_object(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__string* out, bool* impossible, int depth) {
    gpt2__vector<const gpt2__schema_kw*> props = gpt2__schema_all(view, "properties"), additional = gpt2__schema_all(view, "additionalProperties");
    const gpt2__vector<const gpt2__schema_kw*> names_kws = gpt2__schema_all(view, "propertyNames"), uneval = gpt2__schema_all(view, "unevaluatedProperties");
    bool named = false;
    for (const gpt2__schema_kw* kw : props) {
        if (kw->value->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, kw->pointer, "properties must be an object");
        named = named || !kw->value->keys.empty();
    }
    gpt2__vector<gpt2__string> req;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, "required")) {
        if (kw->value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw->pointer, "required must be an array of strings");
        for (const auto& r : kw->value->items) {
            if (r.kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, kw->pointer, "required must be an array of strings");
            if (std::find(req.begin(), req.end(), r.text) == req.end()) req.push_back(r.text);
        }
    }
    uint32_t min_count = 0, max_count = UINT32_MAX;
    bool has_min = false, has_max = false;
    const gpt2__schema_kw *min_kw = nullptr, *max_kw = nullptr;
    GPT2__TRY(gpt2__schema_count(cv, view, "minProperties", true, &min_count, &has_min, &min_kw));
    GPT2__TRY(gpt2__schema_count(cv, view, "maxProperties", false, &max_count, &has_max, &max_kw));
    if (!has_max) max_count = UINT32_MAX;
    if (min_count > max_count) return gpt2__schema_contradiction(cv, max_kw->pointer, "maxProperties is less than minProperties", impossible);
    if (has_max && req.size() > max_count) return gpt2__schema_contradiction(cv, max_kw->pointer, "maxProperties is less than the properties required", impossible);
    /* unevaluatedProperties: the keys no properties, patternProperties or additionalProperties of
       the schema (its in-place applicators' too) evaluated must meet its schema. Held where it is
       the schema's own keyword (the one of a part sees only its part) and the evaluated keys are
       known as the grammar is made; keywords of a complement evaluate nothing. */
    const gpt2__schema_kw* unevaluated = nullptr;
    for (const gpt2__schema_kw* kw : uneval) {
        if (kw->value->kind == GPT2__JSON_BOOL && kw->value->boolean) continue; /* true: every key may be there */
        if (unevaluated || kw->level != 0)
            return gpt2__schema_refuse(cv, kw->pointer, "'unevaluatedProperties' is enforced where it is the schema's own keyword (one inside allOf's part, a branch or a $ref's target sees only its part)");
        unevaluated = kw;
    }
    for (const gpt2__schema_kw* kw : additional)
        if (unevaluated && kw->evaluates) unevaluated = nullptr; /* additionalProperties evaluates every key its properties do not */
    const gpt2__vector<const gpt2__schema_kw*> pattern_kws = gpt2__schema_all(view, "patternProperties");
    if (unevaluated && !pattern_kws.empty())
        return gpt2__schema_refuse(cv, unevaluated->pointer, "'unevaluatedProperties' beside 'patternProperties' is not enforced");
    const gpt2__schema_part unevaluated_part = unevaluated ? gpt2__schema_part{unevaluated->value, unevaluated->pointer, true, unevaluated->made} : gpt2__schema_part{nullptr, "", true, false};
    /* patternProperties: one pattern, held exactly in two forms. With additionalProperties false
       and no named properties, the keys are those the pattern matches, each value its schema;
       with a pattern that matches every name ("" or ".*", unanchored), every extra value has its
       schema. Elsewhere a key could meet both the pattern and a name or the additional
       properties, whose schemas it must then both meet: refused. */
    const gpt2__schema_kw* patterns = pattern_kws.empty() ? nullptr : pattern_kws[0];
    if (patterns && patterns->value->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, patterns->pointer, "patternProperties must be an object");
    if (patterns && (patterns->value->keys.size() > 1 || pattern_kws.size() > 1)) return gpt2__schema_refuse(cv, patterns->pointer, "'patternProperties' is enforced only with one pattern");
    if (patterns && patterns->value->keys.empty()) patterns = nullptr;
    const char* ws = gpt2__schema_ws(cv);
    gpt2__string extra_value, extra_key; /* extra_key: the keys' rule where a pattern or propertyNames gives it; else any name but the named ones */
    bool extra_allowed = true;
    if (patterns) {
        const gpt2__schema_kw* additional_kw = additional.empty() ? nullptr : additional[0];
        const gpt2__string& regex = patterns->value->keys[0];
        const bool every_name = regex.empty() || regex == ".*";
        const bool open = !additional_kw || (additional_kw->value->kind == GPT2__JSON_BOOL && additional_kw->value->boolean);
        const bool closed = additional_kw && additional_kw->value->kind == GPT2__JSON_BOOL && !additional_kw->value->boolean;
        if (additional.size() > 1 || (additional_kw && additional_kw->owner != patterns->owner) || !(every_name ? open || closed : closed))
            return gpt2__schema_refuse(cv, patterns->pointer, "'patternProperties' is enforced only with additionalProperties false, or with a pattern that matches every name (\"\" or \".*\")");
        if (every_name ? named : named || !req.empty())
            return gpt2__schema_refuse(cv, patterns->pointer, every_name ? "'patternProperties' beside 'properties' is not enforced"
                                                                        : "'patternProperties' with additionalProperties false is enforced only without 'properties' and 'required'");
        if (const gpt2__schema_kw* other = !names_kws.empty() ? names_kws[0] : has_min ? min_kw : has_max ? max_kw : nullptr)
            return gpt2__schema_refuse(cv, other->pointer, "'patternProperties' beside propertyNames, minProperties or maxProperties is not enforced");
        if (!every_name) GPT2__TRY(gpt2__schema_pattern_string(cv, regex, patterns->pointer, "patternProperties", &extra_key));
        bool none = false;
        GPT2__TRY(gpt2__schema_expr(cv, patterns->value->items[0], patterns->pointer + "/" + gpt2__schema_escape_pointer(regex), &extra_value, &none, depth + 1));
        extra_allowed = !none;
    } else {
        /* an extra key meets every additionalProperties (none of their schemas names it), and
           unevaluatedProperties where it holds */
        gpt2__vector<gpt2__schema_part> parts;
        for (const gpt2__schema_kw* kw : additional) parts.push_back({kw->value, kw->pointer, kw->evaluates, kw->made});
        if (unevaluated) parts.push_back(unevaluated_part);
        bool none = false;
        GPT2__TRY(gpt2__schema_all_expr(cv, parts, &extra_value, &none, depth));
        extra_allowed = !none;
    }
    /* propertyNames: every key is a string its schemas take. Known names are checked here (an
       enum, a const, lengths); the extra keys are the strings of its schemas, where no known
       name could be one of them too */
    if (!names_kws.empty() && extra_allowed) {
        gpt2__vector<gpt2__schema_part> parts;
        for (const gpt2__schema_kw* kw : names_kws) parts.push_back({kw->value, kw->pointer, false, kw->made});
        if (named || !req.empty()) {
            /* the extra keys: the names an enum or const allows, but the known ones */
            gpt2__string alts;
            for (const gpt2__schema_kw* kw : names_kws) {
                const gpt2__json* values = kw->value->kind == GPT2__JSON_OBJECT ? kw->value->get("enum") : nullptr;
                const gpt2__json* single = kw->value->kind == GPT2__JSON_OBJECT ? kw->value->get("const") : nullptr;
                if (names_kws.size() > 1 || (!values && !single) || (values && values->kind != GPT2__JSON_ARRAY))
                    return gpt2__schema_refuse(cv, kw->pointer, "'propertyNames' beside 'properties' or 'required' is enforced only as an enum or a const");
                gpt2__vector<const gpt2__json*> candidates;
                if (single) candidates.push_back(single);
                else
                    for (const auto& v : values->items) candidates.push_back(&v);
                for (const gpt2__json* v : candidates) {
                    if (v->kind != GPT2__JSON_STRING || gpt2__schema_name_allowed(*kw->value, v->text) != 1) continue;
                    bool known = std::find(req.begin(), req.end(), v->text) != req.end();
                    for (const gpt2__schema_kw* p : props) known = known || p->value->get(v->text);
                    if (known) continue;
                    gpt2__json key;
                    key.kind = GPT2__JSON_STRING;
                    key.text = v->text;
                    alts += alts.empty() ? "" : " | ";
                    gpt2__schema_json_literal(cv, key, &alts);
                }
            }
            if (alts.empty()) extra_allowed = false;
            else extra_key = gpt2__schema_add_rule(cv, alts);
        } else {
            gpt2__json* string_type = &cv->made.emplace_back();
            string_type->kind = GPT2__JSON_OBJECT;
            string_type->keys.push_back("type");
            string_type->items.emplace_back();
            string_type->items.back().kind = GPT2__JSON_STRING;
            string_type->items.back().text = "string";
            parts.push_back({string_type, names_kws[0]->pointer, false, true});
            bool none = false;
            GPT2__TRY(gpt2__schema_all_expr(cv, parts, &extra_key, &none, depth));
            extra_allowed = !none;
        }
    }
    /* the members: every named property (its schemas all, with each additionalProperties whose
       schema does not name it, and unevaluatedProperties where no evaluating properties names it),
       then the required names no properties gives (extra properties that must be there) */
    gpt2__vector<gpt2__schema_member> list;
    gpt2__vector<gpt2__string> names;
    auto member = [&](const gpt2__string& name, const gpt2__string& value, bool required) { /* "name": value */
        gpt2__json key;
        key.kind = GPT2__JSON_STRING;
        key.text = name;
        gpt2__string kv;
        gpt2__schema_json_literal(cv, key, &kv);
        kv += gpt2__string(ws) + " \":\" " + ws + " " + value + ws;
        list.push_back({kv, required});
    };
    auto key_allowed = [&](const gpt2__string& name, bool* allowed) {
        *allowed = true;
        for (const gpt2__schema_kw* kw : names_kws) {
            const int verdict = gpt2__schema_name_allowed(*kw->value, name);
            if (verdict < 0) return gpt2__schema_refuse(cv, kw->pointer, "'propertyNames' beside 'properties' or 'required' is enforced only as an enum or a const");
            *allowed = *allowed && verdict == 1;
        }
        return GPT2_OK;
    };
    for (const gpt2__schema_kw* kw : props)
        for (const gpt2__string& name : kw->value->keys) {
            if (std::find(names.begin(), names.end(), name) != names.end()) continue; /* made where first named */
            names.push_back(name);
            const bool required = std::find(req.begin(), req.end(), name) != req.end();
            gpt2__vector<gpt2__schema_part> parts;
            bool evaluated = false;
            for (const gpt2__schema_kw* p : props)
                for (size_t i = 0; i < p->value->keys.size(); i++)
                    if (p->value->keys[i] == name) {
                        parts.push_back({&p->value->items[i], p->pointer + "/" + gpt2__schema_escape_pointer(name), p->evaluates, p->made});
                        evaluated = evaluated || p->evaluates;
                    }
            for (const gpt2__schema_kw* a : additional) {
                const gpt2__json* own = a->owner ? a->owner->get("properties") : nullptr;
                if (!(own && own->kind == GPT2__JSON_OBJECT && own->get(name))) parts.push_back({a->value, a->pointer, a->evaluates, a->made});
            }
            if (unevaluated && !evaluated) parts.push_back(unevaluated_part);
            bool allowed = false;
            GPT2__TRY(key_allowed(name, &allowed));
            gpt2__string value;
            bool none = !allowed;
            if (!none) GPT2__TRY(gpt2__schema_all_expr(cv, parts, &value, &none, depth));
            if (none) {
                if (required) {
                    *impossible = true;
                    return GPT2_OK;
                }
                continue;
            }
            member(name, value, required);
        }
    for (const auto& r : req) {
        if (std::find(names.begin(), names.end(), r) != names.end()) continue;
        bool allowed = false;
        GPT2__TRY(key_allowed(r, &allowed));
        if (!extra_allowed || !allowed) {
            *impossible = true;
            return GPT2_OK;
        }
        names.push_back(r);
        member(r, extra_value, true);
    }
    gpt2__string extra_kv;
    if (extra_allowed && !extra_key.empty()) {
        extra_kv = extra_key + ws + " \":\" " + ws + " " + extra_value + ws;
    } else if (extra_allowed) {
        gpt2__string key;
        gpt2__schema_other_key(cv, names, 0, &key);
        cv->used_char = true;
        extra_kv = "\"\\\"\" " + key + ws + " \":\" " + ws + " " + extra_value + ws;
    }
    /* minProperties counts the distinct keys: the named and required ones written, and one extra at
       most (two extras may be one key written twice, which a JSON reader keeps once) */
    if (has_min && min_count > list.size() + (extra_allowed ? 1 : 0)) {
        char why[200];
        std::snprintf(why, sizeof why, "'minProperties' is held up to the properties the schema names and one more (two other keys may be one written twice): here %zu",
                      list.size() + (extra_allowed ? 1 : 0));
        if (extra_allowed) return gpt2__schema_held_in_part(cv, min_kw->pointer, why, impossible);
        return gpt2__schema_contradiction(cv, min_kw->pointer, "minProperties is more than the properties the object may have", impossible);
    }
    extra_kv = extra_kv.empty() ? extra_kv : gpt2__schema_add_rule(cv, extra_kv);
    for (auto& m : list) m.kv = gpt2__schema_add_rule(cv, m.kv);
    gpt2__string members;
    bool possible = false;
    size_t states = (size_t)(has_max ? max_count : 1) + 1;
    for (size_t i = 0; i < list.size() && states <= GPT2__SCHEMA_MAX_ANY_ORDER_STATES; i++) states *= 2;
    if (cv->any_order && list.size() > 1 && states <= GPT2__SCHEMA_MAX_ANY_ORDER_STATES)
        gpt2__schema_members_any_order(cv, list, extra_kv, min_count, max_count, &members, &possible);
    else
        GPT2__TRY(gpt2__schema_members_in_order(cv, list, extra_kv, min_count, max_count, &members, &possible, has_min ? min_kw : max_kw));
    if (!possible) {
        *impossible = true;
        return GPT2_OK;
    }
    *out = gpt2__schema_add_rule(cv, "\"{\" " + gpt2__string(ws) + " " + members + " \"}\"");
    return GPT2_OK;
}

static gpt2_result gpt2__schema_complement(gpt2__schema_converter* cv, const gpt2__json& schema, const gpt2__string& pointer, bool made, int depth, gpt2__vector<gpt2__schema_part>* out,
                                           unsigned within = GPT2__T_ALL);
static const gpt2__json* gpt2__schema_made_any_of(gpt2__schema_converter* cv, const gpt2__vector<gpt2__schema_part>& branches);

/* An array's items: each position meets the schemas every schema of the view gives it (its
   tuple's, prefixItems or draft 4-7's items array, for the first ones; the items after the tuple,
   items or additionalItems, for the rest), with minItems and maxItems, contains (minContains,
   maxContains) and unevaluatedItems. */
static gpt2_result gpt2__schema_array(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__string* out, bool* impossible, int depth) {
    uint32_t lo = 0, hi = UINT32_MAX;
    bool has_lo = false, has_hi = false;
    const gpt2__schema_kw* max_kw = nullptr;
    GPT2__TRY(gpt2__schema_count(cv, view, "minItems", true, &lo, &has_lo));
    GPT2__TRY(gpt2__schema_count(cv, view, "maxItems", false, &hi, &has_hi, &max_kw));
    if (!has_hi) hi = UINT32_MAX;
    if (lo > hi) return gpt2__schema_contradiction(cv, max_kw->pointer, "maxItems is less than minItems", impossible);
    for (const gpt2__schema_kw* unique : gpt2__schema_all(view, "uniqueItems"))
        if (!(unique->value->kind == GPT2__JSON_BOOL && !unique->value->boolean) && hi > 1) return gpt2__schema_refuse(cv, unique->pointer, "'uniqueItems' is not enforced");
    /* each schema object's tuple and the schema of the items after it */
    struct owner_items {
        const gpt2__json* owner;
        const gpt2__schema_kw *tuple = nullptr, *rest = nullptr;
        bool evaluates = true;
    };
    gpt2__vector<owner_items> owners;
    for (const auto& kw : view) {
        if (kw.key != "items" && kw.key != "prefixItems" && kw.key != "additionalItems") continue;
        size_t o = 0;
        while (o < owners.size() && owners[o].owner != kw.owner) o++;
        if (o == owners.size()) owners.push_back({kw.owner});
        owners[o].evaluates = kw.evaluates;
    }
    size_t k = 0; /* the longest tuple */
    for (owner_items& o : owners) {
        const gpt2__schema_kw *items = nullptr, *prefix = nullptr, *additional = nullptr;
        for (const auto& kw : view) {
            if (kw.owner != o.owner) continue;
            if (kw.key == "items") items = &kw;
            else if (kw.key == "prefixItems") prefix = &kw;
            else if (kw.key == "additionalItems") additional = &kw;
        }
        if (prefix && additional) return gpt2__schema_refuse(cv, additional->pointer, "'additionalItems' beside prefixItems is not enforced");
        if (prefix && items && items->value->kind == GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, items->pointer, "'items' must be a schema beside prefixItems");
        o.tuple = prefix ? prefix : items && items->value->kind == GPT2__JSON_ARRAY ? items : nullptr;
        o.rest = o.tuple == prefix ? items : additional;
        if (o.tuple && o.tuple->value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, o.tuple->pointer, "expected an array of schemas");
        if (o.tuple) k = std::max(k, o.tuple->value->items.size());
    }
    /* unevaluatedItems: the items past every evaluating tuple, where no evaluating schema gives the
       rest a schema and no contains evaluates some of them */
    const gpt2__schema_kw* unevaluated = nullptr;
    for (const gpt2__schema_kw* kw : gpt2__schema_all(view, "unevaluatedItems")) {
        if (kw->value->kind == GPT2__JSON_BOOL && kw->value->boolean) continue;
        if (unevaluated || kw->level != 0)
            return gpt2__schema_refuse(cv, kw->pointer, "'unevaluatedItems' is enforced where it is the schema's own keyword (one inside allOf's part, a branch or a $ref's target sees only its part)");
        unevaluated = kw;
    }
    const gpt2__vector<const gpt2__schema_kw*> contains_kws = gpt2__schema_all(view, "contains");
    size_t evaluated = 0; /* the items the evaluating tuples reach */
    for (const owner_items& o : owners) {
        if (!o.evaluates) continue;
        if (o.rest) unevaluated = nullptr;
        if (o.tuple) evaluated = std::max(evaluated, o.tuple->value->items.size());
    }
    if (unevaluated && !contains_kws.empty()) return gpt2__schema_refuse(cv, unevaluated->pointer, "'unevaluatedItems' beside 'contains' is not enforced");
    auto parts_at = [&](size_t i, gpt2__vector<gpt2__schema_part>* parts) { /* position i's schemas; i = k: the rest's */
        parts->clear();
        for (const owner_items& o : owners) {
            const size_t n = o.tuple ? o.tuple->value->items.size() : 0;
            if (i < n) {
                char index[24];
                std::snprintf(index, sizeof index, "/%zu", i);
                parts->push_back({&o.tuple->value->items[i], o.tuple->pointer + index, o.evaluates, o.tuple->made});
            } else if (o.rest) {
                parts->push_back({o.rest->value, o.rest->pointer, o.evaluates, o.rest->made});
            }
        }
        if (unevaluated && i >= evaluated) parts->push_back({unevaluated->value, unevaluated->pointer, true, unevaluated->made});
    };
    gpt2__vector<gpt2__string> first;
    gpt2__vector<gpt2__schema_part> parts;
    for (size_t i = 0; i < k; i++) {
        gpt2__string e;
        bool none = false;
        parts_at(i, &parts);
        GPT2__TRY(gpt2__schema_all_expr(cv, parts, &e, &none, depth));
        if (none) break; /* no array reaches past item i */
        first.push_back(e);
    }
    if (first.size() < k) hi = std::min<uint32_t>(hi, (uint32_t)first.size()), k = first.size();
    gpt2__string rest_expr;
    bool rest_allowed = true;
    {
        bool none = false;
        parts_at(k, &parts);
        GPT2__TRY(gpt2__schema_all_expr(cv, parts, &rest_expr, &none, depth));
        rest_allowed = !none;
    }
    if (!rest_allowed) hi = std::min<uint32_t>(hi, (uint32_t)k);
    if (lo > hi) {
        *impossible = true;
        return GPT2_OK;
    }
    const char* ws = gpt2__schema_ws(cv);
    char buf[64];
    if (!contains_kws.empty()) {
        /* contains: between minContains (1 unless written) and maxContains items meet its schema.
           Written as "[" (U ",")* M ("," (U ",")* M){min-1, max-1} ("," U)* "]", where M is an item
           that meets it and U any item, or (with maxContains) one that does not */
        const gpt2__schema_kw* c = contains_kws[0];
        if (contains_kws.size() > 1) return gpt2__schema_refuse(cv, contains_kws[1]->pointer, "two 'contains' at once are not enforced");
        if (k > 0) return gpt2__schema_refuse(cv, c->pointer, "'contains' beside a tuple (prefixItems) is not enforced");
        if (has_lo || has_hi) return gpt2__schema_refuse(cv, c->pointer, "'contains' beside minItems or maxItems is not enforced");
        uint32_t min_c = 1, max_c = UINT32_MAX;
        for (const char* key : {"minContains", "maxContains"})
            if (const gpt2__json* v = c->owner ? c->owner->get(key) : nullptr) {
                const gpt2__schema_kw count{key, v, c->pointer.substr(0, c->pointer.rfind('/')) + "/" + key, c->owner};
                GPT2__TRY(gpt2__schema_uint(cv, count, key[1] == 'i' ? &min_c : &max_c));
            }
        if (min_c > max_c) {
            *impossible = true;
            return GPT2_OK;
        }
        if (min_c == 0 && max_c == UINT32_MAX) { /* no item need meet it */
            if (!rest_allowed) {
                *out = gpt2__schema_add_rule(cv, "\"[\" " + gpt2__string(ws) + " \"]\"");
                return GPT2_OK;
            }
            *out = gpt2__schema_add_rule(cv, "\"[\" " + gpt2__string(ws) + " (" + rest_expr + ws + " (\",\" " + ws + " " + rest_expr + ws + ")*)? \"]\"");
            return GPT2_OK;
        }
        gpt2__vector<gpt2__schema_part> matched = parts;
        matched.push_back({c->value, c->pointer, c->evaluates, c->made});
        gpt2__string m_expr, u_expr = rest_expr;
        bool m_none = false, u_none = !rest_allowed;
        GPT2__TRY(gpt2__schema_all_expr(cv, matched, &m_expr, &m_none, depth));
        if (max_c != UINT32_MAX && rest_allowed) {
            gpt2__vector<gpt2__schema_part> complement;
            GPT2__TRY(gpt2__schema_complement(cv, *c->value, c->pointer, c->made, 0, &complement));
            gpt2__vector<gpt2__schema_part> unmatched = parts;
            if (complement.empty()) u_none = true;
            else {
                unmatched.push_back({gpt2__schema_made_any_of(cv, complement), c->pointer, false, true});
                GPT2__TRY(gpt2__schema_all_expr(cv, unmatched, &u_expr, &u_none, depth));
            }
        }
        gpt2__string alts;
        if (min_c == 0) alts = u_none ? "" : "(" + u_expr + ws + " (\",\" " + ws + " " + u_expr + ws + ")*)?"; /* none of them */
        if (!m_none && max_c > 0) {
            const uint32_t from = min_c ? min_c : 1;
            const gpt2__string us = u_none ? gpt2__string() : "(" + u_expr + ws + " \",\" " + ws + ")* ";
            if (max_c == UINT32_MAX) std::snprintf(buf, sizeof buf, "{%u,}", from - 1);
            else std::snprintf(buf, sizeof buf, "{%u,%u}", from - 1, max_c - 1);
            gpt2__string some = us + m_expr + ws + " (\",\" " + ws + " " + us + m_expr + ws + ")" + buf;
            if (!u_none) some += " (\",\" " + gpt2__string(ws) + " " + u_expr + ws + ")*";
            alts += alts.empty() ? "" : " | ";
            alts += "(" + some + ")";
        }
        if (alts.empty()) {
            if (min_c > 0) {
                *impossible = true;
                return GPT2_OK;
            }
            alts = "\"\"";
        }
        *out = gpt2__schema_add_rule(cv, "\"[\" " + gpt2__string(ws) + " (" + alts + ") \"]\"");
        return GPT2_OK;
    }
    /* after(j): the items from j on (j >= 1 written, each before a ","); j reaches k, then the rest */
    gpt2__string tail_rest;
    if (hi > k && rest_allowed) {
        const uint32_t more_lo = lo > k ? lo - (uint32_t)k : 0;
        if (hi == UINT32_MAX) std::snprintf(buf, sizeof buf, "{%u,}", more_lo);
        else std::snprintf(buf, sizeof buf, "{%u,%u}", more_lo, hi - (uint32_t)k);
        if (k == 0) {
            /* no tuple: item ("," item){lo-1, hi-1}, or nothing when lo is 0 */
            gpt2__string item = rest_expr + ws;
            if (hi == UINT32_MAX) std::snprintf(buf, sizeof buf, "{%u,}", lo > 0 ? lo - 1 : 0);
            else std::snprintf(buf, sizeof buf, "{%u,%u}", lo > 0 ? lo - 1 : 0, hi - 1);
            gpt2__string body = "\"[\" " + gpt2__string(ws) + " (" + item + " (\",\" " + ws + " " + item + ")" + buf + ")" + (lo == 0 ? "?" : "") + " \"]\"";
            *out = gpt2__schema_add_rule(cv, body);
            return GPT2_OK;
        }
        tail_rest = "(\",\" " + gpt2__string(ws) + " " + rest_expr + ws + ")" + buf;
    }
    gpt2__string next = tail_rest.empty() ? gpt2__string("\"\"") : tail_rest;
    for (size_t j = k; j-- > 1;) {
        /* after item j-1: item j (and what follows), or the end when j items are enough */
        gpt2__string body = "\",\" " + gpt2__string(ws) + " " + first[j] + ws + " " + next;
        if (j >= lo) body = "(" + body + ") | \"\"";
        if (j + 1 > hi) body = "\"\"";
        next = gpt2__schema_add_rule(cv, body);
    }
    gpt2__string body;
    if (k == 0 || hi == 0) body = "\"[\" " + gpt2__string(ws) + " \"]\"";
    else {
        body = "\"[\" " + gpt2__string(ws) + " " + first[0] + ws + " " + (hi >= 2 || k == 1 ? next : gpt2__string("\"\"")) + " \"]\"";
        if (lo == 0) body += " | \"[\" " + gpt2__string(ws) + " \"]\"";
    }
    *out = gpt2__schema_add_rule(cv, body);
    return GPT2_OK;
}

/* ---- Schemas the converter makes itself ---------------------------------------------------- */

/* Keeps a schema the converter made where it does not move (views point into it). */
static const gpt2__json* gpt2__schema_keep(gpt2__schema_converter* cv, gpt2__json&& schema) {
    cv->made.push_back(std::move(schema));
    return &cv->made.back();
}

static void gpt2__json_put(gpt2__json* object, std::string_view key, gpt2__json value) {
    object->kind = GPT2__JSON_OBJECT;
    object->keys.emplace_back(key);
    object->items.push_back(std::move(value));
}

static gpt2__json gpt2__json_scalar(gpt2__json_kind kind, std::string_view text, bool boolean = false) {
    gpt2__json j;
    j.kind = kind;
    j.text = gpt2__string(text);
    j.boolean = boolean;
    return j;
}

/* "type": the names of the types in `types` ("integer" only where "number" is not). */
static gpt2__json gpt2__json_type_names(unsigned types) {
    static const char* const names[] = {"null", "boolean", "integer", "number", "string", "array", "object"};
    gpt2__json a;
    a.kind = GPT2__JSON_ARRAY;
    for (unsigned i = 0; i < 7; i++)
        if ((types >> i & 1) && !(i == 2 && (types & GPT2__T_NUMBER))) a.items.push_back(gpt2__json_scalar(GPT2__JSON_STRING, names[i]));
    return a;
}

/* A part as a schema to write inside a made one: a made schema is copied, a schema of the
   document named by where it is (GPT2__KW_AT), so that its $refs and messages stay its own. */
static gpt2__json gpt2__schema_part_json(const gpt2__schema_part& p) {
    if (p.made) return *p.schema;
    gpt2__json at;
    gpt2__json_put(&at, GPT2__KW_AT, gpt2__json_scalar(GPT2__JSON_STRING, p.pointer));
    return at;
}

/* The union of parts as one schema: the part, or {"anyOf": [...]}. */
static gpt2__json gpt2__schema_any_of_json(const gpt2__vector<gpt2__schema_part>& parts) {
    if (parts.size() == 1) return gpt2__schema_part_json(parts[0]);
    gpt2__json list, any;
    list.kind = GPT2__JSON_ARRAY;
    for (const auto& p : parts) list.items.push_back(gpt2__schema_part_json(p));
    gpt2__json_put(&any, "anyOf", std::move(list));
    return any;
}

static const gpt2__json* gpt2__schema_made_any_of(gpt2__schema_converter* cv, const gpt2__vector<gpt2__schema_part>& branches) {
    return gpt2__schema_keep(cv, gpt2__schema_any_of_json(branches));
}

/* The types the view's `type` keywords all allow (a number type takes the integers in). */
static gpt2_result gpt2__schema_view_types(gpt2__schema_converter* cv, const gpt2__schema_view& view, unsigned* types) {
    *types = GPT2__T_ALL;
    for (const auto& kw : view)
        if (kw.key == "type") {
            unsigned t = 0;
            GPT2__TRY(gpt2__schema_types(cv, kw, &t));
            if (t & GPT2__T_NUMBER) t |= GPT2__T_INTEGER;
            *types &= t;
        }
    return GPT2_OK;
}

/* The types a view's values can have: its `type` keywords', and its enum's or const's values'
   (through a lone $ref, a few targets deep). For complements, which need only those. */
static unsigned gpt2__schema_possible_types(gpt2__schema_converter* cv, const gpt2__schema_view& view, int hops = 0) {
    if (view.size() == 1 && gpt2__schema_is_ref(view[0].key) && hops < 8) {
        const gpt2__json* target;
        gpt2__string target_pointer;
        gpt2_error quiet{};
        gpt2_error* err = cv->err;
        cv->err = &quiet; /* a $ref that does not resolve is reported where it is converted */
        const gpt2_result res = gpt2__schema_resolve(cv, view[0], &target, &target_pointer);
        cv->err = err;
        if (res != GPT2_OK) return GPT2__T_ALL;
        if (target->kind == GPT2__JSON_BOOL) return target->boolean ? (unsigned)GPT2__T_ALL : 0u;
        if (target->kind != GPT2__JSON_OBJECT) return GPT2__T_ALL;
        gpt2__schema_view v;
        gpt2__schema_view_of(*target, target_pointer, &v);
        return gpt2__schema_possible_types(cv, v, hops + 1);
    }
    unsigned types = GPT2__T_ALL;
    for (const auto& kw : view) {
        unsigned t = GPT2__T_ALL;
        if (kw.key == "type") {
            gpt2_error quiet{};
            gpt2_error* err = cv->err;
            cv->err = &quiet;
            if (gpt2__schema_types(cv, kw, &t) != GPT2_OK) t = GPT2__T_ALL;
            cv->err = err;
        } else if (kw.key == "const") {
            t = gpt2__json_types(*kw.value);
        } else if (kw.key == "enum" && kw.value->kind == GPT2__JSON_ARRAY) {
            t = 0;
            for (const auto& v : kw.value->items) t |= gpt2__json_types(v);
        }
        if (t & (GPT2__T_INTEGER | GPT2__T_NUMBER)) t |= GPT2__T_INTEGER | GPT2__T_NUMBER;
        types &= t;
    }
    return types;
}

/* The types a schema merged with `rest` can have (its allOf and $refs merged in). */
static unsigned gpt2__schema_types_with(gpt2__schema_converter* cv, const gpt2__json& schema, const gpt2__string& pointer, bool made, const gpt2__schema_view& rest) {
    if (schema.kind == GPT2__JSON_BOOL) return schema.boolean ? gpt2__schema_possible_types(cv, rest) : 0u;
    if (schema.kind != GPT2__JSON_OBJECT) return GPT2__T_ALL;
    gpt2__schema_view v;
    gpt2__schema_view_of(schema, pointer, &v, 1, true, made);
    v.insert(v.end(), rest.begin(), rest.end());
    bool none = false;
    gpt2_error quiet{};
    gpt2_error* err = cv->err;
    cv->err = &quiet;
    const gpt2_result res = gpt2__schema_normalize(cv, &v, &none);
    cv->err = err;
    if (res != GPT2_OK) return GPT2__T_ALL;
    return none ? 0 : gpt2__schema_possible_types(cv, v);
}

/* The type a keyword constrains (the others pass it), or 0 for every type. */
static unsigned gpt2__schema_keyword_types(std::string_view k) {
    static const char* const number[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", GPT2__KW_NOT_MULTIPLE, GPT2__KW_FRACTION};
    static const char* const string[] = {"minLength", "maxLength", "pattern", "format", GPT2__KW_NOT_IN};
    static const char* const array[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "contains", "uniqueItems", "unevaluatedItems"};
    static const char* const object[] = {"properties", "required", "additionalProperties", "patternProperties", "minProperties", "maxProperties", "propertyNames",
                                         "dependentRequired", "dependentSchemas", "dependencies", "unevaluatedProperties"};
    for (const char* w : number)
        if (k == w) return GPT2__T_INTEGER | GPT2__T_NUMBER;
    for (const char* w : string)
        if (k == w) return GPT2__T_STRING;
    for (const char* w : array)
        if (k == w) return GPT2__T_ARRAY;
    for (const char* w : object)
        if (k == w) return GPT2__T_OBJECT;
    return 0;
}

static void gpt2__schema_not_value(const gpt2__json& v, gpt2__vector<gpt2__json>* out);

/* Schemas whose union is every value but v: the other types, and of v's, the other values. */
static void gpt2__schema_not_equal(const gpt2__json& v, gpt2__vector<gpt2__json>* out) {
    const unsigned own = v.kind == GPT2__JSON_NUMBER ? GPT2__T_INTEGER | GPT2__T_NUMBER : gpt2__json_types(v);
    gpt2__json others;
    gpt2__json_put(&others, "type", gpt2__json_type_names(GPT2__T_ALL & ~own));
    out->push_back(std::move(others));
    gpt2__schema_not_value(v, out);
}

/* Schemas whose union is every value of v's type but v (written without an exponent, for a
   number): a string none of [v]; a number below or above it; the other boolean; an array of
   another length, or with an item that is not v's; an object without one of v's keys, with
   one whose value is not v's, or with a key more. */
static void gpt2__schema_not_value(const gpt2__json& v, gpt2__vector<gpt2__json>* out) {
    auto typed = [](const char* type) {
        gpt2__json j;
        gpt2__json_put(&j, "type", gpt2__json_scalar(GPT2__JSON_STRING, type));
        return j;
    };
    auto number = [](size_t n) { return gpt2__json_scalar(GPT2__JSON_NUMBER, std::to_string(n).c_str()); };
    auto any_of = [](gpt2__vector<gpt2__json>&& schemas) {
        gpt2__json any, list;
        list.kind = GPT2__JSON_ARRAY;
        list.items = std::move(schemas);
        gpt2__json_put(&any, "anyOf", std::move(list));
        return any;
    };
    switch (v.kind) {
    case GPT2__JSON_NULL: break;
    case GPT2__JSON_BOOL: {
        gpt2__json j, other;
        other.kind = GPT2__JSON_ARRAY;
        other.items.push_back(gpt2__json_scalar(GPT2__JSON_BOOL, "", !v.boolean));
        gpt2__json_put(&j, "enum", std::move(other));
        out->push_back(std::move(j));
        break;
    }
    case GPT2__JSON_STRING: {
        gpt2__json j = typed("string"), list;
        list.kind = GPT2__JSON_ARRAY;
        list.items.push_back(v);
        gpt2__json_put(&j, GPT2__KW_NOT_IN, std::move(list));
        out->push_back(std::move(j));
        break;
    }
    case GPT2__JSON_NUMBER:
        for (const char* side : {"exclusiveMaximum", "exclusiveMinimum"}) {
            gpt2__json j = typed("number");
            gpt2__json_put(&j, side, v);
            out->push_back(std::move(j));
        }
        break;
    case GPT2__JSON_ARRAY: {
        const size_t n = v.items.size();
        if (n > 0) {
            gpt2__json shorter = typed("array");
            gpt2__json_put(&shorter, "maxItems", number(n - 1));
            out->push_back(std::move(shorter));
        }
        gpt2__json longer = typed("array");
        gpt2__json_put(&longer, "minItems", number(n + 1));
        out->push_back(std::move(longer));
        for (size_t i = 0; i < n; i++) {
            gpt2__json j = typed("array"), prefix;
            gpt2__json_put(&j, "minItems", number(n));
            gpt2__json_put(&j, "maxItems", number(n));
            prefix.kind = GPT2__JSON_ARRAY;
            for (size_t k = 0; k < i; k++) prefix.items.push_back(gpt2__json_scalar(GPT2__JSON_BOOL, "", true));
            gpt2__vector<gpt2__json> differs;
            gpt2__schema_not_equal(v.items[i], &differs);
            prefix.items.push_back(any_of(std::move(differs)));
            gpt2__json_put(&j, "prefixItems", std::move(prefix));
            out->push_back(std::move(j));
        }
        break;
    }
    case GPT2__JSON_OBJECT: {
        gpt2__json all = typed("object"), keys;
        keys.kind = GPT2__JSON_ARRAY;
        for (size_t i = 0; i < v.keys.size(); i++) {
            keys.items.push_back(gpt2__json_scalar(GPT2__JSON_STRING, v.keys[i]));
            gpt2__json lacking = typed("object"), absent;
            gpt2__json_put(&absent, v.keys[i], gpt2__json_scalar(GPT2__JSON_BOOL, "", false));
            gpt2__json_put(&lacking, "properties", std::move(absent));
            out->push_back(std::move(lacking));
            gpt2__json differing = typed("object"), required, property;
            required.kind = GPT2__JSON_ARRAY;
            required.items.push_back(gpt2__json_scalar(GPT2__JSON_STRING, v.keys[i]));
            gpt2__vector<gpt2__json> differs;
            gpt2__schema_not_equal(v.items[i], &differs);
            gpt2__json_put(&property, v.keys[i], any_of(std::move(differs)));
            gpt2__json_put(&differing, "required", std::move(required));
            gpt2__json_put(&differing, "properties", std::move(property));
            out->push_back(std::move(differing));
        }
        gpt2__json_put(&all, "required", std::move(keys)); /* all of v's keys and one more */
        gpt2__json_put(&all, "minProperties", number(v.keys.size() + 1));
        out->push_back(std::move(all));
        break;
    }
    }
}

/* The values the schema refuses, as a union of schemas the converter can write (each of
   `out`'s parts; none: the schema takes every value). De Morgan's: a value is refused by the
   types the schema does not allow, or, of a type it allows, by one of its keywords, each
   complemented (minimum 5: exclusiveMaximum 5 among the numbers; required ["a"]: objects without
   "a"; properties {"a": S}: objects whose "a" meets the complement of S; enum: the values of its
   types that are none of them, numbers as the intervals between). A keyword whose complement a
   grammar cannot write is refused (a pattern, a format, uniqueItems). Where the exact complement
   would cost much, a part of it is written (numbers with an exponent): fewer values, never more.
   Complements' keywords evaluate nothing. `within`: the types the caller will keep (those of the
   schema the complement meets): a keyword of other types is not complemented (nor refused). */
static gpt2_result gpt2__schema_complement(gpt2__schema_converter* cv, const gpt2__json& schema, const gpt2__string& pointer, bool made_schema, int depth, gpt2__vector<gpt2__schema_part>* out,
                                           unsigned within) {
    if (depth > 32) return gpt2__schema_refuse(cv, pointer, "complements (not, if, oneOf) nest too deep (32 levels at most)");
    auto emit = [&](gpt2__json&& made) { out->push_back({gpt2__schema_keep(cv, std::move(made)), pointer, false, true}); };
    if (schema.kind == GPT2__JSON_BOOL) {
        if (!schema.boolean) emit(gpt2__json_scalar(GPT2__JSON_BOOL, "", true));
        return GPT2_OK;
    }
    if (schema.kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, pointer, "a schema must be an object or a boolean");
    gpt2__schema_view view;
    gpt2__schema_view_of(schema, pointer, &view, 0, false, made_schema);
    bool none = false;
    GPT2__TRY(gpt2__schema_normalize(cv, &view, &none));
    if (none) {
        emit(gpt2__json_scalar(GPT2__JSON_BOOL, "", true));
        return GPT2_OK;
    }
    if (view.size() == 1 && (gpt2__schema_is_ref(view[0].key) || view[0].key == GPT2__KW_AT)) {
        const gpt2__json* target;
        gpt2__string target_pointer;
        GPT2__TRY(gpt2__schema_resolve(cv, view[0], &target, &target_pointer));
        return gpt2__schema_complement(cv, *target, target_pointer, false, depth + 1, out, within);
    }
    unsigned types = 0;
    GPT2__TRY(gpt2__schema_view_types(cv, view, &types));
    if (within & (GPT2__T_INTEGER | GPT2__T_NUMBER)) within |= GPT2__T_INTEGER | GPT2__T_NUMBER;
    /* with a type: the complement of each keyword among the allowed types it constrains */
    auto typed = [&](unsigned t) {
        gpt2__json made;
        if (t != GPT2__T_ALL) gpt2__json_put(&made, "type", gpt2__json_type_names(t));
        else made.kind = GPT2__JSON_OBJECT;
        return made;
    };
    unsigned others = GPT2__T_ALL & ~types & within;
    if ((types & GPT2__T_INTEGER) && !(types & GPT2__T_NUMBER) && (within & GPT2__T_NUMBER)) { /* the numbers that are no integers (written without an exponent) */
        others &= ~(GPT2__T_INTEGER | GPT2__T_NUMBER);
        gpt2__json made = typed(GPT2__T_NUMBER);
        gpt2__json_put(&made, GPT2__KW_FRACTION, gpt2__json_scalar(GPT2__JSON_BOOL, "", true));
        emit(std::move(made));
    }
    if (others) emit(typed(others));
    const unsigned numbers = types & within & (GPT2__T_INTEGER | GPT2__T_NUMBER);
    gpt2__schema_end lower, upper;
    GPT2__TRY(gpt2__schema_bounds(cv, view, &lower, &upper));
    for (const gpt2__schema_end* end : {&lower, &upper})
        if (end->present && numbers) {
            gpt2__json made = typed(numbers);
            const bool is_lower = end == &lower;
            gpt2__json_put(&made, is_lower ? (end->strict ? "maximum" : "exclusiveMaximum") : (end->strict ? "minimum" : "exclusiveMinimum"),
                           gpt2__json_scalar(GPT2__JSON_NUMBER, gpt2__schema_decimal_text(end->at)));
            emit(std::move(made));
        }
    for (const gpt2__schema_kw& kw : view) {
        const std::string_view k = kw.key;
        const unsigned applies = (gpt2__schema_keyword_types(k) ? gpt2__schema_keyword_types(k) & types : types) & within;
        if (!applies || k == "type" || gpt2__schema_is_bound(k)) continue; /* no value of the types asked for fails it */
        char why[160];
        std::snprintf(why, sizeof why, "the complement of '%.*s' (inside not, if or oneOf) is not enforced", (int)k.size(), k.data());
        if (k == "multipleOf" || k == GPT2__KW_NOT_MULTIPLE) {
            gpt2__json made = typed(applies);
            gpt2__json_put(&made, k == "multipleOf" ? GPT2__KW_NOT_MULTIPLE : "multipleOf", *kw.value);
            emit(std::move(made));
        } else if (k == GPT2__KW_FRACTION) {
            emit(typed(GPT2__T_INTEGER));
        } else if (k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems" || k == "minProperties" || k == "maxProperties") {
            uint32_t n = 0;
            GPT2__TRY(gpt2__schema_uint(cv, kw, &n));
            const bool at_least = k.substr(0, 3) == "min";
            if (at_least && n == 0) continue; /* every value has at least 0 */
            if (!at_least && n >= GPT2__GRAMMAR_MAX_REPEAT) return gpt2__schema_refuse(cv, kw.pointer, why);
            gpt2__string other = gpt2__string(at_least ? "max" : "min") + gpt2__string(k.substr(3));
            gpt2__json made = typed(applies);
            gpt2__json_put(&made, other, gpt2__json_scalar(GPT2__JSON_NUMBER, std::to_string(at_least ? n - 1 : n + 1).c_str()));
            emit(std::move(made));
        } else if (k == GPT2__KW_NOT_IN) {
            gpt2__json made = typed(applies);
            gpt2__json_put(&made, "enum", *kw.value);
            emit(std::move(made));
        } else if (k == "required") {
            if (kw.value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw.pointer, "required must be an array of strings");
            for (const auto& r : kw.value->items) {
                if (r.kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, kw.pointer, "required must be an array of strings");
                gpt2__json absent, made = typed(applies);
                gpt2__json_put(&absent, r.text, gpt2__json_scalar(GPT2__JSON_BOOL, "", false));
                gpt2__json_put(&made, "properties", std::move(absent));
                emit(std::move(made));
            }
        } else if (k == "properties") {
            if (kw.value->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, kw.pointer, "properties must be an object");
            for (size_t i = 0; i < kw.value->keys.size(); i++) {
                gpt2__vector<gpt2__schema_part> c;
                GPT2__TRY(gpt2__schema_complement(cv, kw.value->items[i], kw.pointer + "/" + gpt2__schema_escape_pointer(kw.value->keys[i]), kw.made, depth + 1, &c));
                if (c.empty()) continue;
                gpt2__json made = typed(applies), required, property;
                required.kind = GPT2__JSON_ARRAY;
                required.items.push_back(gpt2__json_scalar(GPT2__JSON_STRING, kw.value->keys[i]));
                gpt2__json_put(&made, "required", std::move(required));
                gpt2__json_put(&property, kw.value->keys[i], gpt2__schema_any_of_json(c));
                gpt2__json_put(&made, "properties", std::move(property));
                emit(std::move(made));
            }
        } else if (k == "items" && kw.value->kind != GPT2__JSON_ARRAY && !(kw.owner && kw.owner->get("prefixItems"))) {
            gpt2__vector<gpt2__schema_part> c; /* an item that meets the complement */
            GPT2__TRY(gpt2__schema_complement(cv, *kw.value, kw.pointer, kw.made, depth + 1, &c));
            if (c.empty()) continue;
            gpt2__json made = typed(applies);
            gpt2__json_put(&made, "contains", gpt2__schema_any_of_json(c));
            emit(std::move(made));
        } else if (k == "contains") {
            /* fewer than minContains, or more than maxContains */
            uint32_t bounds[2] = {1, UINT32_MAX};
            for (int b = 0; b < 2; b++)
                if (const gpt2__json* v = kw.owner ? kw.owner->get(b ? "maxContains" : "minContains") : nullptr) {
                    const gpt2__schema_kw count{b ? "maxContains" : "minContains", v, kw.pointer.substr(0, kw.pointer.rfind('/')) + (b ? "/maxContains" : "/minContains"), kw.owner};
                    GPT2__TRY(gpt2__schema_uint(cv, count, &bounds[b]));
                }
            const gpt2__json inner = gpt2__schema_part_json({kw.value, kw.pointer, false, kw.made});
            if (bounds[0] > 0) {
                gpt2__json made = typed(applies);
                gpt2__json_put(&made, "contains", inner);
                gpt2__json_put(&made, "minContains", gpt2__json_scalar(GPT2__JSON_NUMBER, "0"));
                gpt2__json_put(&made, "maxContains", gpt2__json_scalar(GPT2__JSON_NUMBER, std::to_string(bounds[0] - 1).c_str()));
                emit(std::move(made));
            }
            if (bounds[1] != UINT32_MAX) {
                gpt2__json made = typed(applies);
                gpt2__json_put(&made, "contains", inner);
                gpt2__json_put(&made, "minContains", gpt2__json_scalar(GPT2__JSON_NUMBER, std::to_string((unsigned long long)bounds[1] + 1).c_str()));
                emit(std::move(made));
            }
        } else if (k == "enum" || k == "const") {
            gpt2__vector<const gpt2__json*> values;
            if (k == "const") values.push_back(kw.value);
            else if (kw.value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw.pointer, "enum must be an array");
            else
                for (const auto& v : kw.value->items) values.push_back(&v);
            bool has_null = false, has_true = false, has_false = false;
            gpt2__vector<gpt2__schema_decimal> numbers_in;
            gpt2__json strings;
            strings.kind = GPT2__JSON_ARRAY;
            for (const gpt2__json* v : values) {
                switch (v->kind) {
                case GPT2__JSON_NULL: has_null = true; break;
                case GPT2__JSON_BOOL: (v->boolean ? has_true : has_false) = true; break;
                case GPT2__JSON_STRING: strings.items.push_back(*v); break;
                case GPT2__JSON_ARRAY:
                case GPT2__JSON_OBJECT: break; /* below */
                case GPT2__JSON_NUMBER: {
                    gpt2__schema_decimal d;
                    if (!gpt2__schema_decimal_of(*v, &d)) return gpt2__schema_refuse(cv, kw.pointer, "the complement of a number with more than 18 digits before its point or 64 after is not enforced");
                    numbers_in.push_back(d);
                    break;
                }
                }
            }
            if ((applies & GPT2__T_NULL) && !has_null) emit(typed(GPT2__T_NULL));
            if ((applies & GPT2__T_BOOL) && !(has_true && has_false)) {
                gpt2__json made;
                if (has_true || has_false) {
                    gpt2__json other;
                    other.kind = GPT2__JSON_ARRAY;
                    other.items.push_back(gpt2__json_scalar(GPT2__JSON_BOOL, "", !has_true));
                    gpt2__json_put(&made, "enum", std::move(other));
                } else made = typed(GPT2__T_BOOL);
                emit(std::move(made));
            }
            if (applies & GPT2__T_STRING) {
                gpt2__json made = typed(GPT2__T_STRING);
                if (!strings.items.empty()) gpt2__json_put(&made, GPT2__KW_NOT_IN, std::move(strings));
                emit(std::move(made));
            }
            for (unsigned t : {GPT2__T_ARRAY, GPT2__T_OBJECT}) { /* the arrays or objects that are none of the values */
                if (!(applies & t)) continue;
                gpt2__json made = typed(t), list;
                list.kind = GPT2__JSON_ARRAY;
                for (const gpt2__json* v : values)
                    if (v->kind == (t == GPT2__T_ARRAY ? GPT2__JSON_ARRAY : GPT2__JSON_OBJECT)) list.items.push_back(*v);
                if (!list.items.empty()) gpt2__json_put(&made, GPT2__KW_NOT_IN, std::move(list));
                emit(std::move(made));
            }
            if (const unsigned nt = applies & (GPT2__T_INTEGER | GPT2__T_NUMBER)) { /* the intervals between the numbers */
                std::sort(numbers_in.begin(), numbers_in.end(), gpt2__schema_decimal_less);
                for (size_t i = 0; i <= numbers_in.size(); i++) {
                    if (i > 0 && i < numbers_in.size() && !gpt2__schema_decimal_less(numbers_in[i - 1], numbers_in[i])) continue; /* a value twice */
                    gpt2__json made = typed(nt);
                    if (i > 0) gpt2__json_put(&made, "exclusiveMinimum", gpt2__json_scalar(GPT2__JSON_NUMBER, gpt2__schema_decimal_text(numbers_in[i - 1])));
                    if (i < numbers_in.size()) gpt2__json_put(&made, "exclusiveMaximum", gpt2__json_scalar(GPT2__JSON_NUMBER, gpt2__schema_decimal_text(numbers_in[i])));
                    emit(std::move(made));
                }
            }
        } else if (k == "anyOf") {
            if (kw.value->kind != GPT2__JSON_ARRAY || kw.value->items.empty()) return gpt2__schema_refuse(cv, kw.pointer, "expected a non-empty array of schemas");
            gpt2__json all, list;
            list.kind = GPT2__JSON_ARRAY;
            bool empty = false;
            for (size_t i = 0; i < kw.value->items.size() && !empty; i++) {
                char index[24];
                std::snprintf(index, sizeof index, "/%zu", i);
                gpt2__vector<gpt2__schema_part> c;
                GPT2__TRY(gpt2__schema_complement(cv, kw.value->items[i], kw.pointer + index, kw.made, depth + 1, &c));
                empty = c.empty();
                if (!empty) list.items.push_back(gpt2__schema_any_of_json(c));
            }
            if (empty) continue; /* a branch takes every value */
            gpt2__json_put(&all, "allOf", std::move(list));
            emit(std::move(all));
        } else if (k == "not") {
            out->push_back({kw.value, kw.pointer, false, kw.made});
        } else if (k == "if") {
            const gpt2__json* then_schema = kw.owner ? kw.owner->get("then") : nullptr;
            const gpt2__json* else_schema = kw.owner ? kw.owner->get("else") : nullptr;
            const gpt2__string at = kw.pointer.substr(0, kw.pointer.rfind('/'));
            if (then_schema) { /* if holds and then does not */
                gpt2__vector<gpt2__schema_part> c;
                GPT2__TRY(gpt2__schema_complement(cv, *then_schema, at + "/then", kw.made, depth + 1, &c));
                if (!c.empty()) {
                    gpt2__json all, list;
                    list.kind = GPT2__JSON_ARRAY;
                    list.items.push_back(gpt2__schema_part_json({kw.value, kw.pointer, false, kw.made}));
                    list.items.push_back(gpt2__schema_any_of_json(c));
                    gpt2__json_put(&all, "allOf", std::move(list));
                    emit(std::move(all));
                }
            }
            if (else_schema) { /* neither if nor else holds */
                gpt2__vector<gpt2__schema_part> c_if, c_else;
                GPT2__TRY(gpt2__schema_complement(cv, *kw.value, kw.pointer, kw.made, depth + 1, &c_if));
                GPT2__TRY(gpt2__schema_complement(cv, *else_schema, at + "/else", kw.made, depth + 1, &c_else));
                if (!c_if.empty() && !c_else.empty()) {
                    gpt2__json all, list;
                    list.kind = GPT2__JSON_ARRAY;
                    list.items.push_back(gpt2__schema_any_of_json(c_if));
                    list.items.push_back(gpt2__schema_any_of_json(c_else));
                    gpt2__json_put(&all, "allOf", std::move(list));
                    emit(std::move(all));
                }
            }
        } else if (k == "uniqueItems" && kw.value->kind == GPT2__JSON_BOOL && !kw.value->boolean) {
            continue;
        } else {
            return gpt2__schema_refuse(cv, kw.pointer, why);
        }
    }
    return GPT2_OK;
}

/* ---- Values: equality, and the keywords an enum's values are kept by ------------------------ */

/* Whether two JSON values are equal as JSON Schema compares them: numbers by value (2 and 2.0
   alike), objects whatever their keys' order. */
static bool gpt2__json_equal(const gpt2__json& a, const gpt2__json& b) {
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case GPT2__JSON_NULL: return true;
    case GPT2__JSON_BOOL: return a.boolean == b.boolean;
    case GPT2__JSON_STRING: return a.text == b.text;
    case GPT2__JSON_NUMBER: {
        gpt2__schema_decimal x, y;
        if (!gpt2__schema_decimal_of(a, &x) || !gpt2__schema_decimal_of(b, &y)) return a.text == b.text;
        return !gpt2__schema_decimal_less(x, y) && !gpt2__schema_decimal_less(y, x);
    }
    case GPT2__JSON_ARRAY:
        if (a.items.size() != b.items.size()) return false;
        for (size_t i = 0; i < a.items.size(); i++)
            if (!gpt2__json_equal(a.items[i], b.items[i])) return false;
        return true;
    case GPT2__JSON_OBJECT:
        if (a.keys.size() != b.keys.size()) return false;
        for (size_t i = 0; i < a.keys.size(); i++) {
            const gpt2__json* other = b.get(a.keys[i]);
            if (!other || !gpt2__json_equal(a.items[i], *other)) return false;
        }
        return true;
    }
    return false;
}

/* Whether the view's keyword `kw` keeps the value v of an enum or const beside it; a keyword that
   cannot be checked on a value here is refused. */
static gpt2_result gpt2__schema_keeps(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, const gpt2__json& v, const gpt2__schema_kw& values, bool* keep) {
    const std::string_view k = kw.key;
    *keep = true;
    if (k == "type") {
        unsigned t = 0;
        GPT2__TRY(gpt2__schema_types(cv, kw, &t));
        if (t & GPT2__T_NUMBER) t |= GPT2__T_INTEGER;
        const unsigned vt = gpt2__json_types(v);
        gpt2__schema_decimal d; /* 2.0 is an integer (since draft 6) */
        *keep = (vt & t) || (!cv->draft4 && (t & GPT2__T_INTEGER) && v.kind == GPT2__JSON_NUMBER && gpt2__schema_decimal_of(v, &d) && d.fraction.empty());
    } else if (k == "enum" || k == "const") {
        if (k == "enum" && kw.value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw.pointer, "enum must be an array");
        *keep = k == "const" && gpt2__json_equal(*kw.value, v);
        for (size_t i = 0; k == "enum" && i < kw.value->items.size() && !*keep; i++) *keep = gpt2__json_equal(kw.value->items[i], v);
    } else if (k == GPT2__KW_NOT_IN) {
        for (size_t i = 0; kw.value->kind == GPT2__JSON_ARRAY && i < kw.value->items.size(); i++) *keep = *keep && !gpt2__json_equal(kw.value->items[i], v);
    } else if (k == "minLength" || k == "maxLength" || k == "minItems" || k == "maxItems" || k == "minProperties" || k == "maxProperties") {
        uint32_t n = 0;
        GPT2__TRY(gpt2__schema_uint(cv, kw, &n));
        const gpt2__json_kind kind = k.find("Length") != std::string_view::npos ? GPT2__JSON_STRING : k.find("Items") != std::string_view::npos ? GPT2__JSON_ARRAY : GPT2__JSON_OBJECT;
        if (v.kind == kind) {
            const size_t size = kind == GPT2__JSON_STRING ? gpt2__utf8_code_points(v.text) : kind == GPT2__JSON_ARRAY ? v.items.size() : v.keys.size();
            *keep = k.substr(0, 3) == "min" ? size >= n : size <= n;
        }
    } else if (gpt2__schema_is_bound(k) || k == "multipleOf" || k == GPT2__KW_NOT_MULTIPLE || k == GPT2__KW_FRACTION) {
        if (v.kind != GPT2__JSON_NUMBER) return GPT2_OK;
        gpt2__schema_decimal d;
        if (!gpt2__schema_decimal_of(v, &d)) return gpt2__schema_refuse(cv, values.pointer, "a number beside bounds must have at most 18 digits before its point and 64 after");
        if (k == GPT2__KW_FRACTION) {
            *keep = !d.fraction.empty();
        } else if (gpt2__schema_is_bound(k)) {
            gpt2__schema_view one(1, kw);
            gpt2__schema_end lower, upper;
            GPT2__TRY(gpt2__schema_bounds(cv, one, &lower, &upper));
            *keep = gpt2__schema_between(lower, upper, d);
        } else {
            gpt2__schema_view one(1, kw);
            gpt2__schema_multiple m;
            bool present = false;
            GPT2__TRY(gpt2__schema_multiple_of(cv, one, gpt2__string(k).c_str(), &m, &present));
            *keep = gpt2__schema_is_multiple(d, m) == (k == "multipleOf");
        }
    } else if (k == "required") {
        if (kw.value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw.pointer, "required must be an array of strings");
        for (size_t i = 0; v.kind == GPT2__JSON_OBJECT && i < kw.value->items.size(); i++)
            *keep = *keep && kw.value->items[i].kind == GPT2__JSON_STRING && v.get(kw.value->items[i].text);
    } else if (k == "uniqueItems") {
        const bool unique = !(kw.value->kind == GPT2__JSON_BOOL && !kw.value->boolean);
        for (size_t i = 0; unique && v.kind == GPT2__JSON_ARRAY && i < v.items.size(); i++)
            for (size_t j = i + 1; j < v.items.size(); j++) *keep = *keep && !gpt2__json_equal(v.items[i], v.items[j]);
    } else {
        char msg[200];
        std::snprintf(msg, sizeof msg, "'%.*s' beside %.*s is not enforced (only the keywords that keep or drop each value: type, lengths, bounds, multipleOf, counts, required, enum, const)",
                      (int)k.size(), k.data(), (int)values.key.size(), values.key.data());
        return gpt2__schema_refuse(cv, kw.pointer, msg);
    }
    return GPT2_OK;
}

/* ---- Views to GBNF: unions, then each type ------------------------------------------------- */

/* The union of the branches (views), each made alone; *impossible where none has a value. */
static gpt2_result gpt2__schema_union(gpt2__schema_converter* cv, gpt2__vector<gpt2__schema_view>& branches, const gpt2__schema_kw& applicator, std::string_view pointer,
                                      gpt2__string* out, bool* impossible, int depth) {
    cv->branches += branches.size();
    if (cv->branches > GPT2__SCHEMA_MAX_BRANCHES) {
        char why[200];
        std::snprintf(why, sizeof why, "anyOf, oneOf, not, if and the dependencies make more than %d branches in all (each a copy of the schema around it); not enforced",
                      (int)GPT2__SCHEMA_MAX_BRANCHES);
        return gpt2__schema_refuse(cv, applicator.pointer, why);
    }
    gpt2__string alts;
    for (auto& branch : branches) {
        gpt2__string e;
        bool none = false;
        GPT2__TRY(gpt2__schema_view_expr(cv, std::move(branch), pointer, &e, &none, depth + 1));
        if (none) continue;
        alts += alts.empty() ? "" : " | ";
        alts += e;
    }
    if (alts.empty()) {
        *impossible = true;
        return GPT2_OK;
    }
    *out = gpt2__schema_add_rule(cv, alts);
    return GPT2_OK;
}

/* A branch: `schema`'s keywords (a level down from `applicator`'s) and then `rest`'s; none where
   the schema is false. */
static gpt2_result gpt2__schema_branch(gpt2__schema_converter* cv, const gpt2__schema_view& rest, const gpt2__json& schema, const gpt2__string& pointer,
                                       const gpt2__schema_kw& applicator, bool evaluates, bool made, gpt2__vector<gpt2__schema_view>* branches) {
    if (schema.kind == GPT2__JSON_BOOL) {
        if (schema.boolean) branches->push_back(rest);
        return GPT2_OK;
    }
    if (schema.kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, pointer, "a schema must be an object or a boolean");
    gpt2__schema_view v;
    gpt2__schema_view_of(schema, pointer, &v, (uint16_t)(applicator.level + 1), evaluates && applicator.evaluates, made);
    v.insert(v.end(), rest.begin(), rest.end());
    branches->push_back(std::move(v));
    return GPT2_OK;
}

/* Whether no value can match two of oneOf's branches, by their types (what each branch's `type`,
   `const` or `enum` allows, its allOf and $ref targets' too), their values, or a tag property. */
static bool gpt2__schema_one_of_disjoint(gpt2__schema_converter* cv, const gpt2__schema_kw& kw) {
    unsigned seen = 0;
    for (size_t i = 0; i < kw.value->items.size(); i++) {
        char index[24];
        std::snprintf(index, sizeof index, "/%zu", i);
        const unsigned t = gpt2__schema_types_with(cv, kw.value->items[i], kw.pointer + index, kw.made, gpt2__schema_view());
        if ((seen & t) && !gpt2__schema_discriminated(cv, kw) && !gpt2__schema_disjoint_values(*kw.value)) return false;
        seen |= t;
    }
    return true;
}

/* An applicator (anyOf, oneOf, not, if, the dependencies) as the union of the views it allows,
   each with the rest of the view: anyOf a branch per schema; oneOf the same where its branches
   cannot overlap, else each branch with the complements of the others; not the complement's
   parts; if (if and then) or (the complement of if, and else); dependentRequired and
   dependentSchemas (draft 4-7's dependencies) the objects without the property, and those with
   it and what it asks for (one property at a time). */
static gpt2_result gpt2__schema_expand(gpt2__schema_converter* cv, gpt2__schema_view view, size_t at, std::string_view pointer, gpt2__string* out, bool* impossible, int depth) {
    const gpt2__schema_kw kw = view[at];
    view.erase(view.begin() + (ptrdiff_t)at);
    const gpt2__schema_view& rest = view;
    gpt2__vector<gpt2__schema_view> branches;
    char index[24];
    if (kw.key == "anyOf" || kw.key == "oneOf") {
        if (kw.value->kind != GPT2__JSON_ARRAY || kw.value->items.empty()) return gpt2__schema_refuse(cv, kw.pointer, "expected a non-empty array of schemas");
        const size_t n = kw.value->items.size();
        if (kw.key == "oneOf" && !gpt2__schema_one_of_disjoint(cv, kw)) {
            /* exactly one: branch i and the complement of every other, among the types branch i
               allows (a branch of other types needs none) */
            for (size_t i = 0; i < n; i++) {
                std::snprintf(index, sizeof index, "/%zu", i);
                gpt2__vector<gpt2__schema_view> with;
                GPT2__TRY(gpt2__schema_branch(cv, rest, kw.value->items[i], kw.pointer + index, kw, true, kw.made, &with));
                if (with.empty()) continue;
                const unsigned types_i = gpt2__schema_types_with(cv, kw.value->items[i], kw.pointer + index, kw.made, rest);
                bool dead = types_i == 0;
                for (size_t j = 0; j < n && !dead; j++) {
                    if (j == i) continue;
                    std::snprintf(index, sizeof index, "/%zu", j);
                    if (!(gpt2__schema_types_with(cv, kw.value->items[j], kw.pointer + index, kw.made, gpt2__schema_view()) & types_i)) continue;
                    gpt2__vector<gpt2__schema_part> complement;
                    gpt2_error quiet{};
                    gpt2_error* err = cv->err;
                    cv->err = &quiet;
                    const gpt2_result res = gpt2__schema_complement(cv, kw.value->items[j], kw.pointer + index, kw.made, 0, &complement, types_i);
                    cv->err = err;
                    if (res != GPT2_OK) {
                        char why[sizeof quiet.message + 200];
                        std::snprintf(why, sizeof why, "'oneOf' is enforced where its branches cannot overlap (types, values, a tag property) or each branch's complement can be written (%s)",
                                      quiet.message);
                        return gpt2__schema_refuse(cv, kw.pointer, why);
                    }
                    if (complement.empty()) { /* branch j takes every value branch i does: i never holds alone */
                        dead = true;
                        continue;
                    }
                    gpt2__json list;
                    list.kind = GPT2__JSON_ARRAY;
                    for (const auto& p : complement) list.items.push_back(gpt2__schema_part_json(p));
                    const gpt2__schema_kw not_j{"anyOf", gpt2__schema_keep(cv, std::move(list)), kw.pointer + index, nullptr, (uint16_t)(kw.level + 1), false, true};
                    with[0].push_back(not_j);
                }
                if (!dead) branches.push_back(std::move(with[0]));
            }
        } else {
            for (size_t i = 0; i < n; i++) {
                std::snprintf(index, sizeof index, "/%zu", i);
                GPT2__TRY(gpt2__schema_branch(cv, rest, kw.value->items[i], kw.pointer + index, kw, true, kw.made, &branches));
            }
        }
    } else if (kw.key == "not") {
        gpt2__vector<gpt2__schema_part> c;
        GPT2__TRY(gpt2__schema_complement(cv, *kw.value, kw.pointer, kw.made, 0, &c, gpt2__schema_possible_types(cv, rest)));
        for (const auto& p : c) GPT2__TRY(gpt2__schema_branch(cv, rest, *p.schema, p.pointer, kw, false, p.made, &branches));
    } else if (kw.key == "if") {
        const gpt2__json* then_schema = kw.owner ? kw.owner->get("then") : nullptr;
        const gpt2__json* else_schema = kw.owner ? kw.owner->get("else") : nullptr;
        const gpt2__string owner_pointer = kw.pointer.substr(0, kw.pointer.rfind('/'));
        if (!then_schema && !else_schema) { /* no then and no else: if only annotates */
            branches.push_back(rest);
        } else if (!then_schema) { /* if, or else: (if) or (not if and else) is the same */
            GPT2__TRY(gpt2__schema_branch(cv, rest, *kw.value, kw.pointer, kw, true, kw.made, &branches));
            GPT2__TRY(gpt2__schema_branch(cv, rest, *else_schema, owner_pointer + "/else", kw, true, kw.made, &branches));
        } else {
            gpt2__vector<gpt2__schema_view> with_if;
            GPT2__TRY(gpt2__schema_branch(cv, rest, *kw.value, kw.pointer, kw, true, kw.made, &with_if));
            for (auto& v : with_if) GPT2__TRY(gpt2__schema_branch(cv, v, *then_schema, owner_pointer + "/then", kw, true, kw.made, &branches));
            gpt2__vector<gpt2__schema_part> c;
            GPT2__TRY(gpt2__schema_complement(cv, *kw.value, kw.pointer, kw.made, 0, &c, gpt2__schema_possible_types(cv, rest)));
            for (const auto& p : c) {
                gpt2__vector<gpt2__schema_view> with_not_if;
                GPT2__TRY(gpt2__schema_branch(cv, rest, *p.schema, p.pointer, kw, false, p.made, &with_not_if));
                for (auto& v : with_not_if) {
                    if (else_schema) GPT2__TRY(gpt2__schema_branch(cv, v, *else_schema, owner_pointer + "/else", kw, true, kw.made, &branches));
                    else branches.push_back(std::move(v));
                }
            }
        }
    } else { /* dependentRequired, dependentSchemas, dependencies: one property at a time */
        if (kw.value->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, kw.pointer, "expected an object");
        if (kw.value->keys.empty()) {
            branches.push_back(rest);
        } else {
            const gpt2__string& name = kw.value->keys[0];
            const gpt2__json& wants = kw.value->items[0];
            const gpt2__string where = kw.pointer + "/" + gpt2__schema_escape_pointer(name);
            const bool names = kw.key == "dependentRequired" || (kw.key == "dependencies" && wants.kind == GPT2__JSON_ARRAY);
            gpt2__json required_names;
            required_names.kind = GPT2__JSON_ARRAY;
            required_names.items.push_back(gpt2__json_scalar(GPT2__JSON_STRING, name));
            if (names) {
                if (wants.kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, where, "expected an array of property names");
                for (const auto& w : wants.items) {
                    if (w.kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, where, "expected an array of property names");
                    required_names.items.push_back(w);
                }
            }
            /* the rest of the keyword's properties, for the next step */
            gpt2__schema_view next = rest;
            if (kw.value->keys.size() > 1) {
                gpt2__json more;
                more.kind = GPT2__JSON_OBJECT;
                more.keys.assign(kw.value->keys.begin() + 1, kw.value->keys.end());
                more.items.assign(kw.value->items.begin() + 1, kw.value->items.end());
                gpt2__schema_kw later = kw;
                later.value = gpt2__schema_keep(cv, std::move(more));
                later.made = true;
                next.push_back(later);
            }
            /* non-objects pass: a branch of their own, so that the others are objects only */
            gpt2__json others, without, with;
            gpt2__json_put(&others, "type", gpt2__json_type_names(GPT2__T_ALL & ~GPT2__T_OBJECT));
            gpt2__json absent;
            gpt2__json_put(&absent, name, gpt2__json_scalar(GPT2__JSON_BOOL, "", false));
            gpt2__json_put(&without, "type", gpt2__json_scalar(GPT2__JSON_STRING, "object"));
            gpt2__json_put(&without, "properties", std::move(absent));
            gpt2__json_put(&with, "type", gpt2__json_scalar(GPT2__JSON_STRING, "object"));
            gpt2__json_put(&with, "required", std::move(required_names));
            GPT2__TRY(gpt2__schema_branch(cv, rest, *gpt2__schema_keep(cv, std::move(others)), where, kw, false, true, &branches));
            GPT2__TRY(gpt2__schema_branch(cv, next, *gpt2__schema_keep(cv, std::move(without)), where, kw, false, true, &branches));
            gpt2__vector<gpt2__schema_view> with_name;
            GPT2__TRY(gpt2__schema_branch(cv, next, *gpt2__schema_keep(cv, std::move(with)), where, kw, false, true, &with_name));
            for (auto& v : with_name) {
                if (names) branches.push_back(std::move(v));
                else GPT2__TRY(gpt2__schema_branch(cv, v, wants, where, kw, true, kw.made, &branches));
            }
        }
    }
    return gpt2__schema_union(cv, branches, kw, pointer, out, impossible, depth);
}

/* The expression of a schema as a view: its allOf and $refs merged in, its applicators made
   unions, then an alternative per type. */
static gpt2_result gpt2__schema_view_expr(gpt2__schema_converter* cv, gpt2__schema_view view, std::string_view pointer, gpt2__string* out, bool* impossible, int depth) {
    *impossible = false;
    if (depth > GPT2__SCHEMA_MAX_DEPTH) return gpt2__schema_refuse(cv, pointer, "schemas nest too deep (128 levels at most)");
    GPT2__TRY(gpt2__schema_normalize(cv, &view, impossible));
    if (*impossible) return GPT2_OK;
    if (view.size() == 1 && gpt2__schema_is_ref(view[0].key)) return gpt2__schema_ref_rule(cv, view[0], out);
    if (view.empty()) {
        cv->used_value = true;
        *out = "value";
        return GPT2_OK;
    }
    for (size_t i = 0; i < view.size(); i++) {
        const std::string_view k = view[i].key;
        if (k == "anyOf" || k == "oneOf" || k == "not" || k == "if" || k == "dependentRequired" || k == "dependentSchemas" || k == "dependencies")
            return gpt2__schema_expand(cv, std::move(view), i, pointer, out, impossible, depth);
    }
    unsigned types = 0;
    GPT2__TRY(gpt2__schema_view_types(cv, view, &types));
    const gpt2__schema_kw* values_kw = nullptr;
    for (const auto& kw : view)
        if ((kw.key == "enum" || kw.key == "const") && !values_kw) values_kw = &kw;
    if (!values_kw)
        for (size_t i = 0; i < view.size(); i++) {
            /* an array or object none of some values (a complement): each such value as the union of
               every value but it (gpt2__schema_not_equal), one anyOf for each */
            if (view[i].key != GPT2__KW_NOT_IN || view[i].value->kind != GPT2__JSON_ARRAY) continue;
            gpt2__json strings;
            strings.kind = GPT2__JSON_ARRAY;
            gpt2__schema_view others;
            for (const auto& v : view[i].value->items) {
                if (v.kind != GPT2__JSON_ARRAY && v.kind != GPT2__JSON_OBJECT) {
                    strings.items.push_back(v);
                    continue;
                }
                gpt2__json list;
                list.kind = GPT2__JSON_ARRAY;
                gpt2__vector<gpt2__json> differ;
                gpt2__schema_not_equal(v, &differ);
                list.items = std::move(differ);
                gpt2__schema_kw any = view[i];
                any.key = "anyOf";
                any.value = gpt2__schema_keep(cv, std::move(list));
                any.made = true;
                others.push_back(std::move(any));
            }
            if (others.empty()) continue;
            view[i].value = gpt2__schema_keep(cv, std::move(strings));
            view.insert(view.end(), others.begin(), others.end());
            return gpt2__schema_view_expr(cv, std::move(view), pointer, out, impossible, depth + 1);
        }
    if (values_kw) {
        /* the values of the enum or const that every other keyword keeps */
        const bool is_enum = values_kw->key == "enum";
        if (is_enum && values_kw->value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, values_kw->pointer, "enum must be an array");
        gpt2__vector<const gpt2__json*> values;
        if (!is_enum) values.push_back(values_kw->value);
        else
            for (const auto& v : values_kw->value->items) values.push_back(&v);
        gpt2__string alts;
        for (const gpt2__json* v : values) {
            bool keep = true;
            for (const auto& other : view)
                if (&other != values_kw && keep) GPT2__TRY(gpt2__schema_keeps(cv, other, *v, *values_kw, &keep));
            if (!keep) continue;
            if (!alts.empty()) alts += " | ";
            if (v->kind == GPT2__JSON_NUMBER && cv->draft4 && (types & GPT2__T_INTEGER) && !(types & GPT2__T_NUMBER)) gpt2__schema_number_literal(&alts, *v, true);
            else gpt2__schema_json_literal(cv, *v, &alts);
        }
        if (alts.empty()) {
            *impossible = true;
            return GPT2_OK;
        }
        *out = gpt2__schema_add_rule(cv, alts);
        return GPT2_OK;
    }
    gpt2__string alts;
    auto add = [&](const gpt2__string& e) {
        if (!alts.empty()) alts += " | ";
        alts += e;
    };
    if (types & GPT2__T_NULL) add("\"null\"");
    if (types & GPT2__T_BOOL) add("(\"true\" | \"false\")");
    if (types & (GPT2__T_NUMBER | GPT2__T_INTEGER)) {
        gpt2__string e;
        bool none = false;
        GPT2__TRY(gpt2__schema_numeric(cv, view, pointer, !(types & GPT2__T_NUMBER), &e, &none));
        if (!none) add(e);
    }
    if (types & GPT2__T_STRING) {
        gpt2__string e;
        bool none = false;
        GPT2__TRY(gpt2__schema_string(cv, view, &e, &none));
        if (!none) add(e);
    }
    if (types & GPT2__T_ARRAY) {
        gpt2__string e;
        bool none = false;
        GPT2__TRY(gpt2__schema_array(cv, view, &e, &none, depth));
        if (!none) add(e);
    }
    if (types & GPT2__T_OBJECT) {
        gpt2__string e;
        bool none = false;
        GPT2__TRY(gpt2__schema_object(cv, view, &e, &none, depth));
        if (!none) add(e);
    }
    if (alts.empty()) {
        *impossible = true;
        return GPT2_OK;
    }
    *out = gpt2__schema_add_rule(cv, alts);
    return GPT2_OK;
}

/* A schema's GBNF expression (a rule's name), or *impossible when no value matches it. */
static gpt2_result gpt2__schema_expr(gpt2__schema_converter* cv, const gpt2__json& schema, std::string_view pointer, gpt2__string* out, bool* impossible, int depth) {
    *impossible = false;
    if (schema.kind == GPT2__JSON_BOOL) {
        if (!schema.boolean) *impossible = true;
        else cv->used_value = true, *out = "value";
        return GPT2_OK;
    }
    if (schema.kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, pointer.empty() ? "(root)" : pointer, "a schema must be an object or a boolean");
    gpt2__schema_view view;
    gpt2__schema_view_of(schema, pointer, &view);
    return gpt2__schema_view_expr(cv, std::move(view), pointer, out, impossible, depth);
}

/* The schema (JSON text) as GBNF text, its start rule `root`. */
static gpt2_result gpt2__json_schema_to_gbnf(const char* text, size_t len, const gpt2_json_schema_params& params, gpt2__string* gbnf, gpt2_error* err) {
    gpt2__json root;
    GPT2__TRY(gpt2__json_parse(text, len, &root, err));
    if (root.kind != GPT2__JSON_OBJECT && root.kind != GPT2__JSON_BOOL)
        return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "json schema: the schema must be an object or a boolean, not %s",
                          root.kind == GPT2__JSON_ARRAY ? "an array" : root.kind == GPT2__JSON_STRING ? "a string" : root.kind == GPT2__JSON_NUMBER ? "a number" : "null");
    const bool compact = params.compact != 0;
    const uint32_t max_ws = params.max_whitespace ? params.max_whitespace : 20;
    gpt2__schema_converter cv;
    cv.root = &root;
    cv.compact = compact;
    cv.any_order = params.any_order != 0;
    cv.integer_fraction = params.integer_fraction != 0; /* not for draft 4, below */
    cv.max_ws = max_ws;
    cv.err = err;
    if (const gpt2__json* draft = root.kind == GPT2__JSON_OBJECT ? root.get("$schema") : nullptr; draft && draft->kind == GPT2__JSON_STRING) {
        const gpt2__string& d = draft->text;
        if (d.find("draft-0") != gpt2__string::npos) cv.draft = GPT2__DRAFT_7_OR_OLDER;
        else if (d.find("2019-09") != gpt2__string::npos || d.find("2020-12") != gpt2__string::npos) cv.draft = GPT2__DRAFT_2019_OR_NEWER;
        cv.draft4 = d.find("draft-04") != gpt2__string::npos || d.find("draft-03") != gpt2__string::npos;
    }
    if (cv.draft4) cv.integer_fraction = false;
    GPT2__TRY(gpt2__schema_index(&cv, root, "", "", 0, &cv.ambiguous_id));
    gpt2__string top;
    bool none = false;
    GPT2__TRY(gpt2__schema_expr(&cv, root, "", &top, &none, 0));
    if (none && !cv.contradiction.empty()) return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %s", cv.contradiction.c_str());
    if (none) return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "json schema: no value matches the schema (false, or its constraints contradict each other)");
    /* $ref targets, each written once, as they were met */
    for (size_t i = 0; i < cv.pending.size(); i++) {
        const gpt2__string pointer = cv.pending[i].first;
        const gpt2__json* target = cv.pending[i].second;
        gpt2__string rule;
        for (const auto& r : cv.refs)
            if (r.first == pointer) rule = r.second;
        gpt2__string e;
        bool target_none = false;
        GPT2__TRY(gpt2__schema_expr(&cv, *target, pointer, &e, &target_none, 0));
        if (target_none)
            return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %s: no value matches this $ref's target (false, or its constraints contradict each other)",
                              pointer.empty() ? "(root)" : pointer.c_str());
        cv.rules += rule + " ::= " + e + "\n";
    }
    char ws[64];
    std::snprintf(ws, sizeof ws, "ws ::= [ \\t\\n\\r]{0,%u}\n", (unsigned)max_ws);
    gbnf->clear();
    *gbnf += "root ::= " + gpt2__string(compact ? "" : "ws ") + top + "\n"; /* ends at the value: whitespace after it would only delay the end */
    *gbnf += cv.rules;
    if (!compact) *gbnf += ws;
    const char* w = compact ? "" : " ws ";
    const bool value = cv.used_value;
    if (cv.used_string || value) *gbnf += "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\"\n";
    if (cv.used_number || value) *gbnf += "number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n";
    if (cv.used_integer) *gbnf += "integer ::= \"-\"? (\"0\" | [1-9] [0-9]*)\n";
    /* a character of a length-bounded string: a code point, so an escaped surrogate pair is one */
    if (cv.used_char) {
        *gbnf += "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}) | \"u\" [dD] [89abAB] [0-9a-fA-F]{2} \"\\\\u\" [dD] [c-fC-F] [0-9a-fA-F]{2})\n";
        *gbnf += "keychar ::= [^\"\\\\\\x00-\\x1F]\n";
    }
    gpt2__schema_format_helpers(cv.used_formats, gbnf);
    if (value) {
        *gbnf += gpt2__string("value ::= \"null\" | \"true\" | \"false\" | number | string | \"[\"") + w + "(value" + w + "(\",\"" + w + "value" + w + ")*)? \"]\" | \"{\"" + w +
                 "(string" + w + "\":\"" + w + "value" + w + "(\",\"" + w + "string" + w + "\":\"" + w + "value" + w + ")*)? \"}\"\n";
    }
    return GPT2_OK;
}

#endif /* GPT2__PART_GRAMMAR_JSON_SCHEMA_H */
