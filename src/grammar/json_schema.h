#ifndef GPT2__PART_GRAMMAR_JSON_SCHEMA_H
#define GPT2__PART_GRAMMAR_JSON_SCHEMA_H
#include "gbnf.h"
#include "regex.h"

/* JSON Schema to a grammar: a strict JSON reader, then a converter that writes GBNF text (the
   design of llama.cpp's json_schema_to_grammar) for gbnf.h's parser. The converter never
   accepts more than the schema does: a keyword that constrains and is not enforced here is
   refused, naming its JSON pointer; it may accept less (properties only in definition order,
   strings and numbers only as written in an enum, extra keys without escapes). */

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
    gpt2__string pointer; /* of the keyword itself: "/properties/age/minimum" */
};
using gpt2__schema_view = gpt2__vector<gpt2__schema_kw>;

/* The converter's recursion: schemas within schemas, and merges (a few frames a level). */
enum { GPT2__SCHEMA_MAX_DEPTH = 128 };

enum : unsigned {
    GPT2__T_NULL = 1, GPT2__T_BOOL = 2, GPT2__T_INTEGER = 4, GPT2__T_NUMBER = 8, GPT2__T_STRING = 16,
    GPT2__T_ARRAY = 32, GPT2__T_OBJECT = 64, GPT2__T_ALL = 127
};

struct gpt2__schema_converter {
    const gpt2__json* root = nullptr;
    bool compact = false;
    uint32_t max_ws = 20;
    gpt2_error* err = nullptr;
    gpt2__string rules;   /* the GBNF written so far, rule by rule */
    uint32_t next_rule = 0;
    /* $refs: the target's pointer -> its rule; targets still to be written */
    gpt2__vector<std::pair<gpt2__string, gpt2__string>> refs;
    gpt2__vector<std::pair<gpt2__string, const gpt2__json*>> pending;
    gpt2__string nested_id; /* the first $id below the root (gpt2__json_nested_id), if any */
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
   and 2.00 are one value, -0 is 0), and the schema's own text. */
static void gpt2__schema_number_literal(gpt2__string* out, const gpt2__json& v) {
    gpt2__schema_decimal d;
    if (!gpt2__schema_decimal_of(v, &d)) return gpt2__schema_literal(out, v.text);
    *out += d.zero() ? "(\"-\"? " : "(";
    gpt2__schema_literal(out, gpt2__schema_decimal_text(d));
    *out += d.fraction.empty() ? " (\".\" \"0\"+)?" : " \"0\"*";
    if (v.text.find_first_of("eE") != gpt2__string::npos) *out += " | ", gpt2__schema_literal(out, v.text);
    *out += ")";
}

/* A JSON value written as JSON (strings with the fewest escapes, keys in their order), for
   const and enum: as GBNF elements, with whitespace where JSON allows it. */
static void gpt2__schema_json_literal(const gpt2__schema_converter* cv, const gpt2__json& v, gpt2__string* out) {
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
        *out += object ? "\"{\"" : "\"[\"";
        *out += gpt2__schema_ws(cv);
        for (size_t i = 0; i < v.items.size(); i++) {
            if (i) *out += " \",\" ", *out += gpt2__schema_ws(cv);
            if (object) {
                gpt2__json key;
                key.kind = GPT2__JSON_STRING;
                key.text = v.keys[i];
                gpt2__schema_json_literal(cv, key, out);
                *out += gpt2__schema_ws(cv), *out += " \":\" ", *out += gpt2__schema_ws(cv);
            }
            *out += " ";
            gpt2__schema_json_literal(cv, v.items[i], out);
            *out += gpt2__schema_ws(cv);
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
                                        "contentMediaType", "contentEncoding", "contentSchema"};
    for (const char* w : words)
        if (k == w) return true;
    return false;
}

/* Keywords that constrain and that the converter enforces (the rest of the constraining ones
   are refused; unknown keywords are ignored, as JSON Schema ignores them). */
static bool gpt2__schema_known(std::string_view k) {
    static const char* const words[] = {
        "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required", "additionalProperties", "items",
        "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum",
        "exclusiveMinimum", "exclusiveMaximum", "uniqueItems", "multipleOf", "pattern", "patternProperties", "propertyNames",
        "minProperties", "maxProperties", "dependencies", "dependentRequired", "dependentSchemas", "if", "then", "else", "not",
        "contains", "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems", "format", "$dynamicRef",
        "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor"};
    for (const char* w : words)
        if (k == w) return true;
    return false;
}

/* A schema's keywords as a view; `pointer` is the schema's own. */
static void gpt2__schema_view_of(const gpt2__json& schema, std::string_view pointer, gpt2__schema_view* view) {
    for (size_t i = 0; i < schema.keys.size(); i++) {
        if (gpt2__schema_annotation(schema.keys[i]) || !gpt2__schema_known(schema.keys[i])) continue;
        gpt2__schema_kw kw;
        kw.key = schema.keys[i];
        kw.value = &schema.items[i];
        kw.pointer = gpt2__string(pointer) + "/" + gpt2__schema_escape_pointer(schema.keys[i]);
        view->push_back(std::move(kw));
    }
}

static const gpt2__schema_kw* gpt2__schema_find(const gpt2__schema_view& view, std::string_view key) {
    for (const auto& kw : view)
        if (kw.key == key) return &kw;
    return nullptr;
}

/* Resolves a local $ref ("#", "#/$defs/x", "#/definitions/x", any JSON pointer in the document). */
static gpt2_result gpt2__schema_resolve(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, const gpt2__json** target, gpt2__string* target_pointer) {
    if (kw.value->kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, kw.pointer, "$ref must be a string");
    const gpt2__string& ref = kw.value->text;
    if (!cv->nested_id.empty())
        return gpt2__schema_refuse(cv, cv->nested_id, "an $id below the root changes where the $refs under it point, and $refs are read against the document's root only (not enforced)");
    if (ref.empty() || ref[0] != '#')
        return gpt2__fail(cv->err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %s: unresolved $ref '%s' (only refs within the document, '#...', are read)", kw.pointer.c_str(), ref.c_str());
    const gpt2__json* at = cv->root;
    size_t i = 1;
    *target_pointer = "";
    while (i < ref.size()) {
        if (ref[i] != '/') return gpt2__fail(cv->err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %s: unresolved $ref '%s' (not a JSON pointer)", kw.pointer.c_str(), ref.c_str());
        size_t end = ref.find('/', i + 1);
        if (end == gpt2__string::npos) end = ref.size();
        gpt2__string token;
        for (size_t j = i + 1; j < end; j++) {
            if (ref[j] == '~' && j + 1 < end && (ref[j + 1] == '0' || ref[j + 1] == '1')) token.push_back(ref[++j] == '0' ? '~' : '/');
            else if (ref[j] == '%' && j + 2 < end && std::isxdigit((unsigned char)ref[j + 1]) && std::isxdigit((unsigned char)ref[j + 2])) {
                token.push_back((char)std::strtol(ref.substr(j + 1, 2).c_str(), nullptr, 16));
                j += 2;
            } else token.push_back(ref[j]);
        }
        const gpt2__json* next = nullptr;
        if (at->kind == GPT2__JSON_OBJECT) next = at->get(token);
        else if (at->kind == GPT2__JSON_ARRAY && !token.empty() && token.find_first_not_of("0123456789") == gpt2__string::npos && token.size() < 9) {
            const size_t index = (size_t)std::strtoul(token.c_str(), nullptr, 10);
            if (index < at->items.size()) next = &at->items[index];
        }
        if (!next) return gpt2__fail(cv->err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %s: unresolved $ref '%s'", kw.pointer.c_str(), ref.c_str());
        at = next;
        *target_pointer += "/" + gpt2__schema_escape_pointer(token);
        i = end;
    }
    *target = at;
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

/* Merges the view of `schema` into `into` (allOf's parts and a schema's own keywords): only
   where the keywords are independent of each other, which is what a merge may assume. */
static gpt2_result gpt2__schema_merge(gpt2__schema_converter* cv, gpt2__schema_view* into, const gpt2__schema_view& more, std::string_view where) {
    static const char* const coupled[][2] = {{"properties", "additionalProperties"}, {"patternProperties", "additionalProperties"}, {"items", "prefixItems"},
                                             {"items", "additionalItems"}};
    for (const auto& kw : more) {
        const gpt2__schema_kw* same = gpt2__schema_find(*into, kw.key);
        if (same && kw.key != "type" && kw.key != "required" && kw.key != "properties")
            return gpt2__fail(cv->err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %.*s: '%.*s' is written at %s and at %s; only parts with different keywords are merged",
                              (int)where.size(), where.data(), (int)kw.key.size(), kw.key.data(), same->pointer.c_str(), kw.pointer.c_str());
        for (const auto& c : coupled)
            for (int side = 0; side < 2; side++)
                if (kw.key == c[side] && gpt2__schema_find(*into, c[1 - side]))
                    return gpt2__fail(cv->err, GPT2_ERROR_BAD_GRAMMAR, "json schema: %.*s: '%s' and '%s' come from different parts and depend on each other; not merged",
                                      (int)where.size(), where.data(), c[0], c[1]);
    }
    into->insert(into->end(), more.begin(), more.end());
    return GPT2_OK;
}

static gpt2_result gpt2__schema_expr(gpt2__schema_converter* cv, const gpt2__json& schema, std::string_view pointer, gpt2__string* out, bool* impossible, int depth);
static gpt2_result gpt2__schema_view_expr(gpt2__schema_converter* cv, gpt2__schema_view view, std::string_view pointer, gpt2__string* out, bool* impossible, int depth);

/* A view with a $ref among its keywords: the target's keywords merged with the others (in
   draft 7 and before, a $ref's siblings are ignored; enforcing them too accepts less). */
static gpt2_result gpt2__schema_deref(gpt2__schema_converter* cv, gpt2__schema_view* view, std::string_view pointer) {
    const gpt2__schema_kw* ref = gpt2__schema_find(*view, "$ref");
    for (int hops = 0; ref && hops < 32; hops++) {
        const gpt2__json* target;
        gpt2__string target_pointer;
        GPT2__TRY(gpt2__schema_resolve(cv, *ref, &target, &target_pointer));
        if (target->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, ref->pointer, "a $ref merged with other keywords must point to an object schema");
        gpt2__schema_view rest;
        for (const auto& kw : *view)
            if (kw.key != "$ref") rest.push_back(kw);
        /* the target's keywords first: its properties come before the ones beside the $ref, as
           a base class's fields come before a subclass's in the objects written */
        gpt2__schema_view merged;
        gpt2__schema_view_of(*target, target_pointer, &merged);
        GPT2__TRY(gpt2__schema_merge(cv, &merged, rest, pointer));
        *view = std::move(merged);
        ref = gpt2__schema_find(*view, "$ref");
    }
    if (ref) return gpt2__schema_refuse(cv, ref->pointer, "$ref chain too long to merge");
    return GPT2_OK;
}

/* Flattens allOf and $ref siblings into one view where they merge. */
static gpt2_result gpt2__schema_flatten(gpt2__schema_converter* cv, gpt2__schema_view* view, std::string_view pointer, int depth) {
    if (depth > GPT2__SCHEMA_MAX_DEPTH) return gpt2__schema_refuse(cv, pointer, "allOf and $ref nest too deep to merge (128 levels at most)");
    const gpt2__schema_kw* all = gpt2__schema_find(*view, "allOf");
    if (!all) return GPT2_OK;
    const gpt2__schema_kw all_of = *all;
    if (all_of.value->kind != GPT2__JSON_ARRAY || all_of.value->items.empty()) return gpt2__schema_refuse(cv, all_of.pointer, "allOf must be a non-empty array of schemas");
    /* the parts' keywords first, then the schema's own: the parts' properties come first, as a
       base class's fields (allOf: [{"$ref": base}]) come before a subclass's in the objects written */
    gpt2__schema_view merged, own;
    for (const auto& kw : *view)
        if (kw.key != "allOf") own.push_back(kw);
    for (size_t i = 0; i < all_of.value->items.size(); i++) {
        const gpt2__json& part = all_of.value->items[i];
        char index[24];
        std::snprintf(index, sizeof index, "/%zu", i);
        const gpt2__string part_pointer = all_of.pointer + index;
        if (part.kind == GPT2__JSON_BOOL) {
            if (part.boolean) continue;
            return gpt2__schema_refuse(cv, part_pointer, "false in allOf: the schema accepts nothing");
        }
        if (part.kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, part_pointer, "a schema must be an object or a boolean");
        gpt2__schema_view part_view;
        gpt2__schema_view_of(part, part_pointer, &part_view);
        GPT2__TRY(gpt2__schema_deref(cv, &part_view, part_pointer));
        GPT2__TRY(gpt2__schema_flatten(cv, &part_view, part_pointer, depth + 1));
        GPT2__TRY(gpt2__schema_merge(cv, &merged, part_view, all_of.pointer));
    }
    GPT2__TRY(gpt2__schema_merge(cv, &merged, own, pointer));
    *view = std::move(merged);
    return GPT2_OK;
}

static gpt2_result gpt2__schema_uint(gpt2__schema_converter* cv, const gpt2__schema_kw& kw, uint32_t* v) {
    const gpt2__json& j = *kw.value;
    if (j.kind != GPT2__JSON_NUMBER || j.text[0] == '-' || j.text.find_first_of(".eE") != gpt2__string::npos || j.text.size() > 5 || std::strtoul(j.text.c_str(), nullptr, 10) > GPT2__GRAMMAR_MAX_REPEAT)
        return gpt2__schema_refuse(cv, kw.pointer, "expected a whole number from 0 to 65536");
    *v = (uint32_t)std::strtoul(j.text.c_str(), nullptr, 10);
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
   boolean exclusives too), the tighter of two on one side. */
static gpt2_result gpt2__schema_bounds(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__schema_end* lower, gpt2__schema_end* upper) {
    const gpt2__schema_kw* minimum = gpt2__schema_find(view, "minimum");
    const gpt2__schema_kw* maximum = gpt2__schema_find(view, "maximum");
    const gpt2__schema_kw* ex_min = gpt2__schema_find(view, "exclusiveMinimum");
    const gpt2__schema_kw* ex_max = gpt2__schema_find(view, "exclusiveMaximum");
    auto take = [&](const gpt2__schema_kw* kw, bool strict, gpt2__schema_end* end) {
        gpt2__schema_decimal v;
        if (!gpt2__schema_decimal_of(*kw->value, &v))
            return gpt2__schema_refuse(cv, kw->pointer, "a number bound must be a number with at most 18 digits before its point and 64 after");
        const bool tighter = !end->present || (end == lower ? gpt2__schema_decimal_less(end->at, v) : gpt2__schema_decimal_less(v, end->at)) ||
                             (!gpt2__schema_decimal_less(end->at, v) && !gpt2__schema_decimal_less(v, end->at) && strict);
        if (tighter) end->present = true, end->strict = strict, end->at = v;
        return GPT2_OK;
    };
    auto draft4 = [](const gpt2__schema_kw* ex) { return ex && ex->value->kind == GPT2__JSON_BOOL; };
    if (minimum) GPT2__TRY(take(minimum, draft4(ex_min) && ex_min->value->boolean, lower));
    if (maximum) GPT2__TRY(take(maximum, draft4(ex_max) && ex_max->value->boolean, upper));
    if (ex_min && !draft4(ex_min)) GPT2__TRY(take(ex_min, true, lower));
    if (ex_max && !draft4(ex_max)) GPT2__TRY(take(ex_max, true, upper));
    return GPT2_OK;
}

/* Whether a number lies between two ends (each absent, inclusive or strict). */
static bool gpt2__schema_between(const gpt2__schema_end& lower, const gpt2__schema_end& upper, const gpt2__schema_decimal& d) {
    const bool above_lower = !lower.present || (lower.strict ? gpt2__schema_decimal_less(lower.at, d) : !gpt2__schema_decimal_less(d, lower.at));
    const bool below_upper = !upper.present || (upper.strict ? gpt2__schema_decimal_less(d, upper.at) : !gpt2__schema_decimal_less(upper.at, d));
    return above_lower && below_upper;
}

/* The keywords that keep or drop each value of an enum or const beside them. */
static bool gpt2__schema_filters_values(std::string_view key) {
    return key == "type" || key == "minLength" || key == "maxLength" || gpt2__schema_is_bound(key);
}

/* The least integer that a lower end lets in, or the greatest that an upper end does. */
static long long gpt2__schema_integer_end(const gpt2__schema_end& end, bool is_lower) {
    const gpt2__schema_decimal& d = end.at;
    const long long toward_zero = d.negative ? -d.whole : d.whole;
    const bool whole = d.fraction.empty();
    const long long floor = toward_zero - (!whole && d.negative), ceil = toward_zero + (!whole && !d.negative);
    return is_lower ? (end.strict ? floor + 1 : ceil) : (end.strict ? ceil - 1 : floor);
}

static gpt2_result gpt2__schema_integer(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view pointer, gpt2__string* out) {
    gpt2__schema_end lower, upper;
    GPT2__TRY(gpt2__schema_bounds(cv, view, &lower, &upper));
    const bool has_lo = lower.present, has_hi = upper.present;
    const long long lo = has_lo ? gpt2__schema_integer_end(lower, true) : 0, hi = has_hi ? gpt2__schema_integer_end(upper, false) : 0;
    if (!has_lo && !has_hi) {
        cv->used_integer = true;
        *out = "integer";
        return GPT2_OK;
    }
    if (has_lo && has_hi && lo > hi) {
        char why[128];
        std::snprintf(why, sizeof why, "contradictory bounds: no integer is at least %lld and at most %lld", lo, hi);
        return gpt2__schema_refuse(cv, pointer, why);
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
    *out = gpt2__schema_add_rule(cv, alts);
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
static gpt2_result gpt2__schema_number(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::string_view pointer, gpt2__string* out) {
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
    if (alts.empty()) return gpt2__schema_refuse(cv, pointer, "contradictory bounds: no number lies between minimum and maximum");
    *out = gpt2__schema_add_rule(cv, alts);
    return GPT2_OK;
}

/* Names and refuses the first keyword of `view` in `list` (keywords that constrain but that
   the converter cannot enforce where they are). */
static gpt2_result gpt2__schema_refuse_any(gpt2__schema_converter* cv, const gpt2__schema_view& view, std::initializer_list<const char*> list, const char* why) {
    for (const char* k : list)
        if (const gpt2__schema_kw* kw = gpt2__schema_find(view, k)) {
            char msg[200];
            std::snprintf(msg, sizeof msg, "'%s' %s", k, why);
            return gpt2__schema_refuse(cv, kw->pointer, msg);
        }
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
        *gbnf += "flabel ::= [A-Za-z0-9] ([A-Za-z0-9-]{0,60} [A-Za-z0-9])?" "\n";
        *gbnf += "ftld ::= [A-Za-z] ([A-Za-z0-9-]{0,60} [A-Za-z0-9])?" "\n";
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

static gpt2_result gpt2__schema_string(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__string* out) {
    const gpt2__schema_kw* min_kw = gpt2__schema_find(view, "minLength");
    const gpt2__schema_kw* max_kw = gpt2__schema_find(view, "maxLength");
    const gpt2__schema_kw* format = gpt2__schema_find(view, "format");
    if (format && format->value->kind == GPT2__JSON_STRING && !gpt2__schema_format_defined(format->value->text)) format = nullptr;
    if (const gpt2__schema_kw* pattern = gpt2__schema_find(view, "pattern")) {
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
    if (!min_kw && !max_kw) {
        cv->used_string = true;
        *out = "string";
        return GPT2_OK;
    }
    uint32_t lo = 0, hi = 0;
    if (min_kw) GPT2__TRY(gpt2__schema_uint(cv, *min_kw, &lo));
    if (max_kw) GPT2__TRY(gpt2__schema_uint(cv, *max_kw, &hi));
    if (max_kw && lo > hi) return gpt2__schema_refuse(cv, max_kw->pointer, "contradictory bounds: maxLength is less than minLength");
    cv->used_char = true;
    char body[96];
    if (max_kw) std::snprintf(body, sizeof body, "\"\\\"\" char{%u,%u} \"\\\"\"", lo, hi);
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

/* The values of the keyword's schema where the keyword may be absent (additionalProperties, the
   items after a tuple): any JSON value when it is; *allowed false when its schema admits none. */
static gpt2_result gpt2__schema_rest_expr(gpt2__schema_converter* cv, const gpt2__schema_kw* kw, gpt2__string* out, bool* allowed, int depth) {
    bool none = false;
    if (kw) {
        GPT2__TRY(gpt2__schema_expr(cv, *kw->value, kw->pointer, out, &none, depth + 1));
    } else {
        cv->used_value = true;
        *out = "value";
    }
    *allowed = !none;
    return GPT2_OK;
}

/* The value of property `name` under every `properties` that names it: one schema, or the
   merge of several (allOf's parts that each describe the property: all of them hold). */
static gpt2_result gpt2__schema_property(gpt2__schema_converter* cv, const gpt2__vector<const gpt2__schema_kw*>& props, std::string_view name, gpt2__string* out, bool* impossible, int depth) {
    gpt2__vector<std::pair<const gpt2__json*, gpt2__string>> schemas; /* each with its pointer */
    for (const gpt2__schema_kw* kw : props)
        for (size_t i = 0; i < kw->value->keys.size(); i++)
            if (kw->value->keys[i] == name) schemas.emplace_back(&kw->value->items[i], kw->pointer + "/" + gpt2__schema_escape_pointer(name));
    if (schemas.size() == 1) return gpt2__schema_expr(cv, *schemas[0].first, schemas[0].second, out, impossible, depth);
    gpt2__schema_view merged;
    for (const auto& [schema, pointer] : schemas) {
        if (schema->kind == GPT2__JSON_BOOL) {
            if (schema->boolean) continue;
            *impossible = true;
            return GPT2_OK;
        }
        if (schema->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, pointer, "a schema must be an object or a boolean");
        gpt2__schema_view part;
        gpt2__schema_view_of(*schema, pointer, &part);
        GPT2__TRY(gpt2__schema_merge(cv, &merged, part, pointer));
    }
    if (merged.empty()) { /* each of them true */
        cv->used_value = true;
        *out = "value";
        return GPT2_OK;
    }
    return gpt2__schema_view_expr(cv, std::move(merged), schemas[0].second, out, impossible, depth);
}

static gpt2_result gpt2__schema_object(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__string* out, bool* impossible, int depth) {
    GPT2__TRY(gpt2__schema_refuse_any(cv, view, {"propertyNames", "minProperties", "maxProperties", "dependencies", "dependentRequired", "dependentSchemas", "unevaluatedProperties"},
                                      "is not enforced"));
    gpt2__vector<const gpt2__schema_kw*> props; /* several where allOf's parts each have theirs */
    bool named = false;
    for (const auto& kw : view)
        if (kw.key == "properties") {
            if (kw.value->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, kw.pointer, "properties must be an object");
            props.push_back(&kw);
            named = named || !kw.value->keys.empty();
        }
    const gpt2__schema_kw* additional = gpt2__schema_find(view, "additionalProperties");
    gpt2__vector<gpt2__string> req;
    for (const auto& kw : view)
        if (kw.key == "required") {
            if (kw.value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, kw.pointer, "required must be an array of strings");
            for (const auto& r : kw.value->items) {
                if (r.kind != GPT2__JSON_STRING) return gpt2__schema_refuse(cv, kw.pointer, "required must be an array of strings");
                req.push_back(r.text);
            }
        }
    /* patternProperties: one pattern, held exactly in two forms. With additionalProperties false
       and no named properties, the keys are those the pattern matches, each value its schema;
       with a pattern that matches every name ("" or ".*", unanchored), every extra value has its
       schema. Elsewhere a key could meet both the pattern and a name or the additional
       properties, whose schemas it must then both meet: refused. */
    const gpt2__schema_kw* patterns = gpt2__schema_find(view, "patternProperties");
    if (patterns && patterns->value->kind != GPT2__JSON_OBJECT) return gpt2__schema_refuse(cv, patterns->pointer, "patternProperties must be an object");
    if (patterns && patterns->value->keys.size() > 1) return gpt2__schema_refuse(cv, patterns->pointer, "'patternProperties' is enforced only with one pattern");
    const bool pattern = patterns && patterns->value->keys.size() == 1;
    const bool named_or_required = named || !req.empty();
    /* the extra properties: patternProperties' or additionalProperties (absent = any value) */
    gpt2__string extra_value, extra_key; /* extra_key: the keys' rule where a pattern gives it; else any name but the named ones */
    bool extra_allowed = true;
    if (pattern) {
        const gpt2__string& regex = patterns->value->keys[0];
        const bool every_name = regex.empty() || regex == ".*";
        const bool open = !additional || (additional->value->kind == GPT2__JSON_BOOL && additional->value->boolean);
        const bool closed = additional && additional->value->kind == GPT2__JSON_BOOL && !additional->value->boolean;
        if (!(every_name ? open || closed : closed))
            return gpt2__schema_refuse(cv, patterns->pointer, "'patternProperties' is enforced only with additionalProperties false, or with a pattern that matches every name (\"\" or \".*\")");
        if (every_name ? named : named_or_required)
            return gpt2__schema_refuse(cv, patterns->pointer, every_name ? "'patternProperties' beside 'properties' is not enforced"
                                                                        : "'patternProperties' with additionalProperties false is enforced only without 'properties' and 'required'");
        if (!every_name) GPT2__TRY(gpt2__schema_pattern_string(cv, regex, patterns->pointer, "patternProperties", &extra_key));
        bool none = false;
        GPT2__TRY(gpt2__schema_expr(cv, patterns->value->items[0], patterns->pointer + "/" + gpt2__schema_escape_pointer(regex), &extra_value, &none, depth + 1));
        extra_allowed = !none;
    } else {
        GPT2__TRY(gpt2__schema_rest_expr(cv, additional, &extra_value, &extra_allowed, depth));
    }
    struct prop {
        gpt2__string name, value;
        bool required;
    };
    gpt2__vector<prop> list;
    gpt2__vector<gpt2__string> names;
    for (const gpt2__schema_kw* kw : props) {
        for (const gpt2__string& name : kw->value->keys) {
            if (std::find(names.begin(), names.end(), name) != names.end()) continue; /* made where first named */
            prop p;
            p.name = name;
            p.required = std::find(req.begin(), req.end(), p.name) != req.end();
            bool none = false;
            GPT2__TRY(gpt2__schema_property(cv, props, name, &p.value, &none, depth + 1));
            names.push_back(p.name);
            if (none) {
                if (p.required) {
                    *impossible = true;
                    return GPT2_OK;
                }
                continue;
            }
            list.push_back(std::move(p));
        }
    }
    for (const auto& r : req) {
        if (std::find(names.begin(), names.end(), r) != names.end()) continue;
        /* required but not in properties: an extra property that must be there */
        if (!extra_allowed) {
            *impossible = true;
            return GPT2_OK;
        }
        names.push_back(r);
        list.push_back({r, extra_value, true});
    }
    const char* ws = gpt2__schema_ws(cv);
    gpt2__string extra_kv;
    if (extra_allowed && !extra_key.empty()) {
        extra_kv = extra_key + ws + " \":\" " + ws + " " + extra_value + ws;
    } else if (extra_allowed) {
        gpt2__string key;
        gpt2__schema_other_key(cv, names, 0, &key);
        cv->used_char = true;
        extra_kv = "\"\\\"\" " + key + ws + " \":\" " + ws + " " + extra_value + ws;
    }
    /* head(i): the members from i on, none written yet; tail(i): some written before */
    const size_t n = list.size();
    gpt2__vector<gpt2__string> head(n + 1), tail(n + 1);
    for (size_t i = 0; i <= n; i++) head[i] = gpt2__schema_rule_name(cv), tail[i] = gpt2__schema_rule_name(cv);
    for (size_t i = 0; i <= n; i++) {
        gpt2__string h, t;
        if (i == n) {
            if (extra_allowed) {
                h = extra_kv + " " + tail[n] + " | ";
                t = "\",\" " + gpt2__string(ws) + " " + extra_kv + " " + tail[n] + " | ";
            }
        } else {
            gpt2__json key;
            key.kind = GPT2__JSON_STRING;
            key.text = list[i].name;
            gpt2__string kv;
            gpt2__schema_json_literal(cv, key, &kv);
            kv += gpt2__string(ws) + " \":\" " + ws + " " + list[i].value + ws;
            h = kv + " " + tail[i + 1];
            t = "\",\" " + gpt2__string(ws) + " " + kv + " " + tail[i + 1];
            if (!list[i].required) h += " | " + head[i + 1], t += " | " + tail[i + 1];
        }
        if (i == n) h += "\"\"", t += "\"\"";
        cv->rules += head[i] + " ::= " + h + "\n" + tail[i] + " ::= " + t + "\n";
    }
    *out = gpt2__schema_add_rule(cv, "\"{\" " + gpt2__string(ws) + " " + head[0] + " \"}\"");
    return GPT2_OK;
}

static gpt2_result gpt2__schema_array(gpt2__schema_converter* cv, const gpt2__schema_view& view, gpt2__string* out, bool* impossible, int depth) {
    GPT2__TRY(gpt2__schema_refuse_any(cv, view, {"contains", "minContains", "maxContains", "unevaluatedItems"}, "is not enforced"));
    if (const gpt2__schema_kw* unique = gpt2__schema_find(view, "uniqueItems"))
        if (!(unique->value->kind == GPT2__JSON_BOOL && !unique->value->boolean)) return gpt2__schema_refuse(cv, unique->pointer, "'uniqueItems' is not enforced");
    const gpt2__schema_kw* items = gpt2__schema_find(view, "items");
    const gpt2__schema_kw* prefix = gpt2__schema_find(view, "prefixItems");
    const gpt2__schema_kw* additional = gpt2__schema_find(view, "additionalItems");
    const gpt2__schema_kw* min_kw = gpt2__schema_find(view, "minItems");
    const gpt2__schema_kw* max_kw = gpt2__schema_find(view, "maxItems");
    uint32_t lo = 0, hi = UINT32_MAX;
    if (min_kw) GPT2__TRY(gpt2__schema_uint(cv, *min_kw, &lo));
    if (max_kw) GPT2__TRY(gpt2__schema_uint(cv, *max_kw, &hi));
    if (lo > hi) return gpt2__schema_refuse(cv, max_kw->pointer, "contradictory bounds: maxItems is less than minItems");
    /* the tuple's schemas (prefixItems, or draft 4-7's items as an array), then the rest's */
    const gpt2__schema_kw* tuple = prefix ? prefix : items && items->value->kind == GPT2__JSON_ARRAY ? items : nullptr;
    const gpt2__schema_kw* rest = tuple == prefix ? items : additional;
    if (prefix && additional) return gpt2__schema_refuse(cv, additional->pointer, "'additionalItems' beside prefixItems is not enforced");
    if (tuple && tuple->value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, tuple->pointer, "expected an array of schemas");
    gpt2__vector<gpt2__string> first;
    size_t k = 0;
    if (tuple) {
        for (size_t i = 0; i < tuple->value->items.size(); i++) {
            char index[24];
            std::snprintf(index, sizeof index, "/%zu", i);
            gpt2__string e;
            bool none = false;
            GPT2__TRY(gpt2__schema_expr(cv, tuple->value->items[i], tuple->pointer + index, &e, &none, depth + 1));
            if (none) break; /* no array reaches past item i */
            first.push_back(e);
        }
        k = first.size();
        if (k < tuple->value->items.size()) hi = std::min<uint32_t>(hi, (uint32_t)k);
    }
    gpt2__string rest_expr;
    bool rest_allowed = true;
    GPT2__TRY(gpt2__schema_rest_expr(cv, rest, &rest_expr, &rest_allowed, depth));
    if (!rest_allowed) hi = std::min<uint32_t>(hi, (uint32_t)k);
    if (lo > hi) {
        *impossible = true;
        return GPT2_OK;
    }
    const char* ws = gpt2__schema_ws(cv);
    char buf[64];
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

/* The expression of a schema as a view (its allOf merged in): an alternative per type. */
static gpt2_result gpt2__schema_view_expr(gpt2__schema_converter* cv, gpt2__schema_view view, std::string_view pointer, gpt2__string* out, bool* impossible, int depth) {
    if (depth > GPT2__SCHEMA_MAX_DEPTH) return gpt2__schema_refuse(cv, pointer, "schemas nest too deep (128 levels at most)");
    GPT2__TRY(gpt2__schema_flatten(cv, &view, pointer, depth));
    GPT2__TRY(gpt2__schema_refuse_any(cv, view, {"not", "if", "then", "else", "$dynamicRef", "$recursiveRef", "multipleOf"}, "is not enforced"));
    /* types: every one `type` names (all of them where there are several `type`s: the common ones) */
    unsigned types = GPT2__T_ALL;
    for (const auto& kw : view)
        if (kw.key == "type") {
            unsigned t;
            GPT2__TRY(gpt2__schema_types(cv, kw, &t));
            if (t & GPT2__T_NUMBER) t |= GPT2__T_INTEGER;
            types &= t;
        }
    const gpt2__schema_kw* ref = gpt2__schema_find(view, "$ref");
    const gpt2__schema_kw* any = gpt2__schema_find(view, "anyOf");
    const gpt2__schema_kw* one = gpt2__schema_find(view, "oneOf");
    const gpt2__schema_kw* en = gpt2__schema_find(view, "enum");
    const gpt2__schema_kw* co = gpt2__schema_find(view, "const");
    if (ref) {
        if (view.size() == 1) return gpt2__schema_ref_rule(cv, *ref, out);
        /* keywords beside the $ref: merged with its target's */
        GPT2__TRY(gpt2__schema_deref(cv, &view, pointer));
        return gpt2__schema_view_expr(cv, std::move(view), pointer, out, impossible, depth + 1);
    }
    if (en || co) {
        if (en && co) return gpt2__schema_refuse(cv, co->pointer, "'const' beside 'enum' is not enforced");
        const gpt2__schema_kw* values_kw = en ? en : co;
        /* beside them: the keywords that keep or drop each value */
        for (const auto& other : view)
            if (&other != values_kw && !gpt2__schema_filters_values(other.key)) {
                char msg[200];
                std::snprintf(msg, sizeof msg, "'%.*s' beside %s is not enforced (only type, minLength, maxLength and the number bounds are)",
                              (int)other.key.size(), other.key.data(), en ? "enum" : "const");
                return gpt2__schema_refuse(cv, other.pointer, msg);
            }
        gpt2__vector<const gpt2__json*> values;
        if (co) values.push_back(co->value);
        else if (en->value->kind != GPT2__JSON_ARRAY) return gpt2__schema_refuse(cv, en->pointer, "enum must be an array");
        else
            for (const auto& v : en->value->items) values.push_back(&v);
        uint32_t min_length = 0, max_length = UINT32_MAX;
        if (const gpt2__schema_kw* kw = gpt2__schema_find(view, "minLength")) GPT2__TRY(gpt2__schema_uint(cv, *kw, &min_length));
        if (const gpt2__schema_kw* kw = gpt2__schema_find(view, "maxLength")) GPT2__TRY(gpt2__schema_uint(cv, *kw, &max_length));
        gpt2__schema_end lower, upper;
        GPT2__TRY(gpt2__schema_bounds(cv, view, &lower, &upper));
        gpt2__string alts;
        for (const gpt2__json* v : values) {
            if (!(gpt2__json_types(*v) & types)) continue;
            if (v->kind == GPT2__JSON_STRING) {
                const size_t length = gpt2__utf8_code_points(v->text);
                if (length < min_length || length > max_length) continue;
            }
            if (v->kind == GPT2__JSON_NUMBER && (lower.present || upper.present)) {
                gpt2__schema_decimal d;
                if (!gpt2__schema_decimal_of(*v, &d))
                    return gpt2__schema_refuse(cv, values_kw->pointer, "a number beside bounds must have at most 18 digits before its point and 64 after");
                if (!gpt2__schema_between(lower, upper, d)) continue;
            }
            if (!alts.empty()) alts += " | ";
            gpt2__schema_json_literal(cv, *v, &alts);
        }
        if (alts.empty()) {
            *impossible = true;
            return GPT2_OK;
        }
        *out = gpt2__schema_add_rule(cv, alts);
        return GPT2_OK;
    }
    if (any || one) {
        const gpt2__schema_kw* kw = any ? any : one;
        if (any && one) return gpt2__schema_refuse(cv, one->pointer, "'oneOf' beside 'anyOf' is not enforced");
        /* keywords beside it are merged into every branch */
        gpt2__schema_view siblings;
        for (const auto& other : view)
            if (&other != kw) siblings.push_back(other);
        if (kw->value->kind != GPT2__JSON_ARRAY || kw->value->items.empty()) return gpt2__schema_refuse(cv, kw->pointer, "expected a non-empty array of schemas");
        /* oneOf: one and only one branch; read as anyOf only where no value can match two
           branches, which is checked here by their types (what each branch's `type`,
           `const` or `enum` allows), their values, or a tag property */
        if (one) {
            unsigned seen = 0;
            for (size_t i = 0; i < kw->value->items.size(); i++) {
                const gpt2__json& b = kw->value->items[i];
                unsigned t = GPT2__T_ALL;
                if (b.kind == GPT2__JSON_OBJECT) {
                    if (const gpt2__json* ty = b.get("type")) {
                        gpt2__schema_kw tk{"type", ty, kw->pointer};
                        if (gpt2__schema_types(cv, tk, &t) != GPT2_OK) t = GPT2__T_ALL;
                    } else if (const gpt2__json* c = b.get("const")) {
                        t = gpt2__json_types(*c);
                    } else if (const gpt2__json* e = b.get("enum")) {
                        t = 0;
                        if (e->kind == GPT2__JSON_ARRAY)
                            for (const auto& v : e->items) t |= gpt2__json_types(v);
                    }
                    if (b.get("$ref") || b.get("anyOf") || b.get("oneOf") || b.get("allOf")) t = GPT2__T_ALL;
                } else if (b.kind == GPT2__JSON_BOOL && !b.boolean) {
                    t = 0;
                }
                if (t & (GPT2__T_NUMBER | GPT2__T_INTEGER)) t |= GPT2__T_NUMBER | GPT2__T_INTEGER;
                if ((seen & t) && !gpt2__schema_discriminated(cv, *kw) && !gpt2__schema_disjoint_values(*kw->value))
                    return gpt2__schema_refuse(cv, kw->pointer, "'oneOf' is enforced only where its branches allow different types, different string, boolean or null values (const, enum), or are objects told apart by a required property's string const or enum (a value matching two branches would be accepted)");
                seen |= t;
            }
        }
        gpt2__string alts;
        for (size_t i = 0; i < kw->value->items.size(); i++) {
            char index[24];
            std::snprintf(index, sizeof index, "/%zu", i);
            gpt2__string e;
            bool none = false;
            const gpt2__json& branch = kw->value->items[i];
            if (siblings.empty() || branch.kind != GPT2__JSON_OBJECT) {
                if (!siblings.empty() && branch.kind == GPT2__JSON_BOOL && branch.boolean) GPT2__TRY(gpt2__schema_view_expr(cv, siblings, kw->pointer + index, &e, &none, depth + 1));
                else GPT2__TRY(gpt2__schema_expr(cv, branch, kw->pointer + index, &e, &none, depth + 1));
            } else {
                gpt2__schema_view merged;
                gpt2__schema_view_of(branch, kw->pointer + index, &merged);
                GPT2__TRY(gpt2__schema_deref(cv, &merged, kw->pointer + index));
                GPT2__TRY(gpt2__schema_flatten(cv, &merged, kw->pointer + index, depth + 1));
                GPT2__TRY(gpt2__schema_merge(cv, &merged, siblings, kw->pointer + index));
                GPT2__TRY(gpt2__schema_view_expr(cv, std::move(merged), kw->pointer + index, &e, &none, depth + 1));
            }
            if (none) continue;
            if (!alts.empty()) alts += " | ";
            alts += e;
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
    if (types & GPT2__T_NUMBER) {
        gpt2__string e;
        GPT2__TRY(gpt2__schema_number(cv, view, pointer, &e));
        add(e);
    }
    else if (types & GPT2__T_INTEGER) {
        gpt2__string e;
        GPT2__TRY(gpt2__schema_integer(cv, view, pointer, &e));
        add(e);
    }
    if (types & GPT2__T_STRING) {
        gpt2__string e;
        GPT2__TRY(gpt2__schema_string(cv, view, &e));
        add(e);
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

/* The first "$id" (draft 4: "id") below the root that names another document: where the refs
   under it would resolve against it. Any object of the document counts (an enum's value too),
   which may refuse more than needed, never less. */
static bool gpt2__json_nested_id(const gpt2__json& v, std::string_view pointer, gpt2__string* found) {
    for (size_t i = 0; i < v.items.size(); i++) {
        gpt2__string at = gpt2__string(pointer) + "/";
        if (v.kind == GPT2__JSON_OBJECT) {
            at += gpt2__schema_escape_pointer(v.keys[i]);
            const gpt2__json& item = v.items[i];
            if (!pointer.empty() && (v.keys[i] == "$id" || v.keys[i] == "id") && item.kind == GPT2__JSON_STRING && !item.text.empty() && item.text[0] != '#') {
                *found = at;
                return true;
            }
        } else {
            char index[24];
            std::snprintf(index, sizeof index, "%zu", i);
            at += index;
        }
        if (gpt2__json_nested_id(v.items[i], at, found)) return true;
    }
    return false;
}

/* The schema (JSON text) as GBNF text, its start rule `root`. */
static gpt2_result gpt2__json_schema_to_gbnf(const char* text, size_t len, bool compact, uint32_t max_ws, gpt2__string* gbnf, gpt2_error* err) {
    gpt2__json root;
    GPT2__TRY(gpt2__json_parse(text, len, &root, err));
    if (root.kind != GPT2__JSON_OBJECT && root.kind != GPT2__JSON_BOOL)
        return gpt2__fail(err, GPT2_ERROR_BAD_GRAMMAR, "json schema: the schema must be an object or a boolean, not %s",
                          root.kind == GPT2__JSON_ARRAY ? "an array" : root.kind == GPT2__JSON_STRING ? "a string" : root.kind == GPT2__JSON_NUMBER ? "a number" : "null");
    gpt2__schema_converter cv;
    cv.root = &root;
    cv.compact = compact;
    cv.max_ws = max_ws;
    cv.err = err;
    gpt2__json_nested_id(root, "", &cv.nested_id);
    gpt2__string top;
    bool none = false;
    GPT2__TRY(gpt2__schema_expr(&cv, root, "", &top, &none, 0));
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
