#ifndef GPT2__PART_GRAMMAR_REGEX_H
#define GPT2__PART_GRAMMAR_REGEX_H
#include "../common.h"

/* JSON Schema's "pattern" to GBNF: the ECMAScript regular expressions schemas write (classes,
   groups, alternatives, greedy and lazy quantifiers, ^ and $ at the ends) as an expression over
   the JSON text of a string's contents. A character the string holds is matched as JSON writes
   it: '"', '\\' and the controls only escaped, every other one only as itself (an escape such as
   \u0041 for 'A' is not accepted: fewer texts, never more). What a grammar cannot hold
   (lookaround, backreferences, \b, Unicode property classes) is refused, with the reason. */

enum { GPT2__REGEX_MAX_REPEAT = 1000, GPT2__REGEX_MAX_DEPTH = 64 };

using gpt2__regex_set = gpt2__vector<std::pair<uint32_t, uint32_t>>; /* code point ranges */

struct gpt2__regex_reader {
    std::string_view s;
    size_t at = 0;
    const char* any = "";          /* a GBNF rule of one JSON character, for unanchored ends */
    const char* refused = nullptr; /* why, once the pattern is refused */
    bool start_anchor = false, end_anchor = false; /* of the top-level alternative being read */
};

static bool gpt2__regex_refuse(gpt2__regex_reader* r, const char* why) {
    if (!r->refused) r->refused = why;
    return false;
}

/* Sorted, overlaps and neighbours merged. */
static void gpt2__regex_set_normalize(gpt2__regex_set* set) {
    std::sort(set->begin(), set->end());
    gpt2__regex_set merged;
    for (const auto& range : *set) {
        if (!merged.empty() && range.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, range.second);
        else merged.push_back(range);
    }
    *set = merged;
}

static gpt2__regex_set gpt2__regex_set_complement(gpt2__regex_set set) {
    gpt2__regex_set_normalize(&set);
    gpt2__regex_set out;
    uint32_t next = 0;
    for (const auto& range : set) {
        if (range.first > next) out.push_back({next, range.first - 1});
        next = range.second + 1;
    }
    if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
    return out;
}

/* \d \w \s and their complements (ECMAScript's sets: \s is Unicode's white space). */
static bool gpt2__regex_class_escape(char c, gpt2__regex_set* out) {
    gpt2__regex_set set;
    switch (c | 0x20) {
    case 'd': set = {{'0', '9'}}; break;
    case 'w': set = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; break;
    case 's': set = {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A}, {0x2028, 0x2029},
                     {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}}; break;
    default: return false;
    }
    if (c >= 'A' && c <= 'Z') set = gpt2__regex_set_complement(set);
    out->insert(out->end(), set.begin(), set.end());
    return true;
}

static int gpt2__regex_hex(std::string_view s, size_t at, size_t digits) {
    if (at + digits > s.size()) return -1;
    int v = 0;
    for (size_t i = 0; i < digits; i++) {
        const char c = s[at + i];
        const int d = c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* One code point of the pattern (UTF-8, as the JSON reader decoded it). */
static uint32_t gpt2__regex_code_point(gpt2__regex_reader* r) {
    const unsigned char c = (unsigned char)r->s[r->at];
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = n == 1 ? c : c & (0x3F >> (n - 1));
    for (size_t i = 1; i < n && r->at + i < r->s.size(); i++) cp = cp << 6 | ((unsigned char)r->s[r->at + i] & 0x3F);
    r->at = std::min(r->s.size(), r->at + n);
    return cp;
}

/* The escape at r->at (just after its backslash) into `set`: one code point, or a class when
   *is_class. In a class, \b is the backspace; outside, a word boundary (refused). */
static bool gpt2__regex_escape(gpt2__regex_reader* r, bool in_class, gpt2__regex_set* set, bool* is_class) {
    *is_class = false;
    if (r->at >= r->s.size()) return gpt2__regex_refuse(r, "it ends with a lone backslash");
    const char c = r->s[r->at];
    if (gpt2__regex_class_escape(c, set)) {
        r->at++;
        *is_class = true;
        return true;
    }
    uint32_t cp = 0;
    switch (c) {
    case 'n': cp = '\n'; break;
    case 'r': cp = '\r'; break;
    case 't': cp = '\t'; break;
    case 'f': cp = '\f'; break;
    case 'v': cp = '\v'; break;
    case 'b':
        if (!in_class) return gpt2__regex_refuse(r, "word boundaries (\\b) are not enforced");
        cp = '\b';
        break;
    case '0':
        if (r->at + 1 < r->s.size() && r->s[r->at + 1] >= '0' && r->s[r->at + 1] <= '9') return gpt2__regex_refuse(r, "octal escapes are not enforced");
        cp = 0;
        break;
    case 'x':
    case 'u': {
        const size_t digits = c == 'x' ? 2 : 4;
        const int v = gpt2__regex_hex(r->s, r->at + 1, digits);
        if (v < 0) return gpt2__regex_refuse(r, c == 'x' ? "\\x needs two hexadecimal digits" : "\\u needs four hexadecimal digits (\\u{...} is not enforced)");
        if (v >= 0xD800 && v <= 0xDFFF) return gpt2__regex_refuse(r, "escaped surrogates are not enforced");
        r->at += digits;
        cp = (uint32_t)v;
        break;
    }
    default:
        if ((c >= '1' && c <= '9') || c == 'k') return gpt2__regex_refuse(r, "backreferences are not enforced");
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return gpt2__regex_refuse(r, "an escape the pattern subset lacks (\\p, \\c, \\B, ...)");
        if ((unsigned char)c >= 0x80) return gpt2__regex_refuse(r, "an escaped non-ASCII character");
        cp = (unsigned char)c; /* \. \- \/ ...: the character itself */
    }
    r->at++;
    set->push_back({cp, cp});
    return true;
}

/* A GBNF class item: the code point as itself where that reads plainly. */
static void gpt2__regex_class_item(gpt2__string* out, uint32_t cp) {
    char buf[16];
    if ((cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')) out->push_back((char)cp);
    else std::snprintf(buf, sizeof buf, cp < 0x80 ? "\\x%02X" : cp < 0x10000 ? "\\u%04X" : "\\U%08X", cp), out->append(buf);
}

/* The JSON text of one character of `set`: a GBNF expression. */
static void gpt2__regex_write_set(gpt2__regex_set set, gpt2__string* out) {
    gpt2__regex_set_normalize(&set);
    auto has = [&](uint32_t cp) {
        for (const auto& range : set)
            if (range.first <= cp && cp <= range.second) return true;
        return false;
    };
    if (set.size() == 1 && set[0].first == set[0].second && set[0].first >= 0x20 && set[0].first < 0x7F && set[0].first != '"' && set[0].first != '\\') {
        *out += gpt2__string("\"") + (char)set[0].first + "\"";
        return;
    }
    gpt2__vector<gpt2__string> parts;
    gpt2__string plain = "[";
    for (const auto& range : set) { /* written as themselves: all but '"', '\\', the controls and the surrogates */
        const uint32_t cut[][2] = {{0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, 0xD7FF}, {0xE000, 0x10FFFF}};
        for (const auto& c : cut) {
            const uint32_t lo = std::max(range.first, c[0]), hi = std::min(range.second, c[1]);
            if (lo > hi) continue;
            gpt2__regex_class_item(&plain, lo);
            if (hi > lo) plain.push_back('-'), gpt2__regex_class_item(&plain, hi);
        }
    }
    if (plain.size() > 1) parts.push_back(plain + "]");
    if (has('"')) parts.push_back("\"\\\\\\\"\"");
    if (has('\\')) parts.push_back("\"\\\\\\\\\"");
    /* the controls: \n and its kind, and \u00XX (either case of hex digit) */
    gpt2__string short_forms;
    for (const char* f = "b\bf\fn\nr\rt\t"; *f; f += 2)
        if (has((unsigned char)f[1])) short_forms.push_back(f[0]);
    if (!short_forms.empty()) parts.push_back("\"\\\\\" [" + short_forms + "]");
    for (uint32_t high = 0; high < 2; high++) {
        gpt2__string digits;
        for (uint32_t low = 0; low < 16; low++) {
            if (!has(high * 16 + low)) continue;
            digits.push_back("0123456789ABCDEF"[low]);
            if (low >= 10) digits.push_back("abcdef"[low - 10]);
        }
        if (!digits.empty()) parts.push_back("\"\\\\u00" + gpt2__string(1, (char)('0' + high)) + "\" [" + digits + "]");
    }
    if (parts.size() == 1) {
        *out += parts[0];
        return;
    }
    *out += "(";
    for (size_t i = 0; i < parts.size(); i++) *out += (i ? " | " : " ") + parts[i];
    *out += " )";
}

static bool gpt2__regex_alternatives(gpt2__regex_reader* r, gpt2__string* out, int depth, bool* nullable);

/* One member of a class at r->at: an escape (a class itself when *is_class) or a code point. */
static bool gpt2__regex_class_member(gpt2__regex_reader* r, gpt2__regex_set* set, bool* is_class) {
    *is_class = false;
    if (r->s[r->at] == '\\') {
        r->at++;
        return gpt2__regex_escape(r, true, set, is_class);
    }
    const uint32_t cp = gpt2__regex_code_point(r);
    set->push_back({cp, cp});
    return true;
}

/* A class: [...] or [^...]. */
static bool gpt2__regex_bracket(gpt2__regex_reader* r, gpt2__string* out) {
    const bool negated = r->at < r->s.size() && r->s[r->at] == '^';
    if (negated) r->at++;
    gpt2__regex_set set;
    while (true) {
        if (r->at >= r->s.size()) return gpt2__regex_refuse(r, "a '[' without its ']'");
        if (r->s[r->at] == ']') break;
        gpt2__regex_set item;
        bool item_is_class = false;
        if (!gpt2__regex_class_member(r, &item, &item_is_class)) return false;
        /* a range a-b; a '-' beside a class escape or before ']' is itself */
        if (!item_is_class && r->at + 1 < r->s.size() && r->s[r->at] == '-' && r->s[r->at + 1] != ']') {
            r->at++;
            gpt2__regex_set end;
            bool end_is_class = false;
            if (!gpt2__regex_class_member(r, &end, &end_is_class)) return false;
            if (end_is_class) {
                item.push_back({'-', '-'});
                item.insert(item.end(), end.begin(), end.end());
            } else {
                if (end[0].first < item[0].first) return gpt2__regex_refuse(r, "a class range out of order");
                item[0].second = end[0].first;
            }
        }
        set.insert(set.end(), item.begin(), item.end());
    }
    r->at++;
    if (negated) set = gpt2__regex_set_complement(set);
    if (set.empty()) return gpt2__regex_refuse(r, "an empty class, which matches nothing");
    gpt2__regex_write_set(set, out);
    return true;
}

/* A quantifier's {n}, {n,} or {n,m} at r->at (on '{'); false, r->at kept, when it is not one
   (then '{' is itself, as ECMAScript reads it outside Unicode mode). */
static bool gpt2__regex_braces(gpt2__regex_reader* r, long* lo, long* hi) {
    size_t i = r->at + 1;
    auto number = [&](long* v) {
        const size_t begin = i;
        *v = 0;
        while (i < r->s.size() && r->s[i] >= '0' && r->s[i] <= '9' && i - begin < 9) *v = *v * 10 + (r->s[i++] - '0');
        return i > begin;
    };
    if (!number(lo)) return false;
    *hi = *lo;
    if (i < r->s.size() && r->s[i] == ',') {
        i++;
        if (!number(hi)) *hi = -1;
    }
    if (i >= r->s.size() || r->s[i] != '}') return false;
    r->at = i + 1;
    return true;
}

/* A sequence: atoms, each with its quantifier, up to '|', ')' or the end. *nullable: it can
   match the empty string. */
static bool gpt2__regex_sequence(gpt2__regex_reader* r, gpt2__string* out, int depth, bool* nullable) {
    gpt2__string seq;
    bool first = true;
    *nullable = true;
    while (r->at < r->s.size() && r->s[r->at] != '|' && r->s[r->at] != ')') {
        const char c = r->s[r->at];
        if (c == '^' || c == '$') { /* only at the ends of a top-level alternative */
            r->at++;
            const bool at_end = r->at >= r->s.size() || r->s[r->at] == '|';
            if (depth == 0 && c == '^' && first) r->start_anchor = true;
            else if (depth == 0 && c == '$' && at_end) r->end_anchor = true;
            else return gpt2__regex_refuse(r, "'^' and '$' are enforced only at the ends of the pattern");
            continue;
        }
        gpt2__string atom;
        bool atom_nullable = false;
        r->at++;
        if (c == '(') {
            if (r->s.substr(r->at, 2) == "?:") r->at += 2;
            else if (r->s.substr(r->at, 2) == "?=" || r->s.substr(r->at, 2) == "?!" || r->s.substr(r->at, 3) == "?<=" || r->s.substr(r->at, 3) == "?<!")
                return gpt2__regex_refuse(r, "lookaround is not enforced");
            else if (r->s.substr(r->at, 2) == "?<") {
                const size_t close = r->s.find('>', r->at);
                if (close == std::string_view::npos) return gpt2__regex_refuse(r, "a group name without its '>'");
                r->at = close + 1;
            } else if (r->s.substr(r->at, 1) == "?") return gpt2__regex_refuse(r, "a group modifier the pattern subset lacks");
            if (depth + 1 > GPT2__REGEX_MAX_DEPTH) return gpt2__regex_refuse(r, "groups nest too deep");
            gpt2__string inner;
            if (!gpt2__regex_alternatives(r, &inner, depth + 1, &atom_nullable)) return false;
            if (r->at >= r->s.size() || r->s[r->at] != ')') return gpt2__regex_refuse(r, "a '(' without its ')'");
            r->at++;
            atom = "(" + inner + ")";
        } else if (c == '[') {
            if (!gpt2__regex_bracket(r, &atom)) return false;
        } else if (c == '.') {
            gpt2__regex_write_set(gpt2__regex_set_complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}), &atom);
        } else if (c == '\\') {
            gpt2__regex_set set;
            bool is_class;
            if (!gpt2__regex_escape(r, false, &set, &is_class)) return false;
            gpt2__regex_write_set(set, &atom);
        } else if (c == '*' || c == '+' || c == '?') {
            return gpt2__regex_refuse(r, "a quantifier with nothing to repeat");
        } else {
            r->at--;
            const uint32_t cp = gpt2__regex_code_point(r);
            gpt2__regex_write_set({{cp, cp}}, &atom);
        }
        /* its quantifier; a lazy one (a trailing '?') matches the same strings */
        long lo = 1, hi = 1;
        if (r->at < r->s.size()) {
            const char q = r->s[r->at];
            if (q == '*') lo = 0, hi = -1, r->at++;
            else if (q == '+') lo = 1, hi = -1, r->at++;
            else if (q == '?') lo = 0, hi = 1, r->at++;
            else if (q == '{' && !gpt2__regex_braces(r, &lo, &hi)) lo = hi = 1;
            if ((lo != 1 || hi != 1) && r->at < r->s.size() && r->s[r->at] == '?') r->at++;
        }
        if (lo > GPT2__REGEX_MAX_REPEAT || hi > GPT2__REGEX_MAX_REPEAT) return gpt2__regex_refuse(r, "a repetition count above 1000");
        if (hi >= 0 && hi < lo) return gpt2__regex_refuse(r, "a repetition {n,m} with m < n");
        /* (x*)* would be a rule that calls itself before reading anything */
        if (atom_nullable && hi < 0) return gpt2__regex_refuse(r, "an unbounded repetition of a group that can match the empty string (write (x*)* as x*)");
        *nullable = *nullable && (lo == 0 || hi == 0 || atom_nullable);
        char q[48] = "";
        if (lo == 0 && hi == -1) std::snprintf(q, sizeof q, "*");
        else if (lo == 1 && hi == -1) std::snprintf(q, sizeof q, "+");
        else if (lo == 0 && hi == 1) std::snprintf(q, sizeof q, "?");
        else if (hi == -1) std::snprintf(q, sizeof q, "{%ld,}", lo);
        else if (lo == hi && lo != 1) std::snprintf(q, sizeof q, "{%ld}", lo);
        else if (lo != hi) std::snprintf(q, sizeof q, "{%ld,%ld}", lo, hi);
        if (hi != 0) seq += (seq.empty() ? "" : " ") + atom + q; /* x{0} matches the empty text */
        first = false;
    }
    *out += seq.empty() ? "\"\"" : seq;
    return true;
}

/* Alternatives a | b | ..., up to ')' or the end. At the top level each may have its anchors;
   an unanchored end matches any text there. */
static bool gpt2__regex_alternatives(gpt2__regex_reader* r, gpt2__string* out, int depth, bool* nullable) {
    *nullable = false;
    while (true) {
        if (depth == 0) r->start_anchor = r->end_anchor = false;
        gpt2__string seq;
        bool seq_nullable = false;
        if (!gpt2__regex_sequence(r, &seq, depth, &seq_nullable)) return false;
        *nullable = *nullable || seq_nullable;
        if (depth == 0) {
            if (!r->start_anchor) seq = gpt2__string(r->any) + "* " + seq;
            if (!r->end_anchor) seq += gpt2__string(" ") + r->any + "*";
        }
        *out += seq;
        if (r->at >= r->s.size() || r->s[r->at] != '|') return true;
        r->at++;
        *out += " | ";
    }
}

/* `pattern` as a GBNF expression of the JSON text of the strings it matches (their contents,
   between the quotes); `any` names a rule of one JSON character, for unanchored ends. Returns
   nullptr, or why the pattern is refused. */
static const char* gpt2__regex_to_gbnf(std::string_view pattern, const char* any, gpt2__string* out) {
    gpt2__regex_reader r;
    r.s = pattern;
    r.any = any;
    gpt2__string body;
    bool nullable = false;
    if (!gpt2__regex_alternatives(&r, &body, 0, &nullable)) return r.refused;
    if (r.at < pattern.size()) return "a ')' without its '('";
    *out = "(" + body + ")";
    return nullptr;
}

#endif /* GPT2__PART_GRAMMAR_REGEX_H */
