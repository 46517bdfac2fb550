// JSON Schema to a grammar: instances the schema accepts match COMPLETE (compact and with
// whitespace), instances it refuses never do; keywords that are not enforced are refused with
// their JSON pointer; malformed schemas are refused with where and why. Then MaskBench's sample
// (../shared/data/maskbench, skipped where it is absent): no invalid instance may match.
#include "helpers.h"
#include "grammar_helpers.h"
#include "test_files.h"
#include <doctest/doctest.h>
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <cctype>
#include <random>

namespace {

struct SchemaGrammar {
    gpt2_grammar* grammar = nullptr;
    gpt2_error err{};
    gpt2_result result = GPT2_OK;
    SchemaGrammar(const std::string& schema, bool compact, bool any_order = false, bool integer_fraction = false) {
        gpt2_json_schema_params p = gpt2_json_schema_default_params();
        p.compact = compact;
        p.any_order = any_order;
        p.integer_fraction = integer_fraction;
        result = gpt2_grammar_from_json_schema(bpe_model().model, schema.data(), schema.size(), &p, &grammar, &err);
    }
    ~SchemaGrammar() { gpt2_grammar_free(grammar); }
    SchemaGrammar(const SchemaGrammar&) = delete;
    SchemaGrammar& operator=(const SchemaGrammar&) = delete;
};

// JSON text without the whitespace between tokens (as json.dumps(separators=(',', ':')) writes it).
std::string compact_json(const std::string& s) {
    std::string out;
    bool in_string = false;
    for (size_t i = 0; i < s.size(); i++) {
        const char c = s[i];
        if (in_string) {
            out += c;
            if (c == '\\' && i + 1 < s.size()) out += s[++i];
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
            out += c;
        } else if (c != ' ' && c != '\n' && c != '\t' && c != '\r') {
            out += c;
        }
    }
    return out;
}

// The same with a space after every ',' and ':' (json.dumps's default separators).
std::string spaced_json(const std::string& s) {
    std::string out;
    bool in_string = false;
    for (size_t i = 0; i < s.size(); i++) {
        const char c = s[i];
        out += c;
        if (in_string) {
            if (c == '\\' && i + 1 < s.size()) out += s[++i];
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == ',' || c == ':') {
            out += ' ';
        }
    }
    return out;
}

struct Case {
    const char* schema;
    std::vector<const char*> valid, invalid;
};

// The valid instances match and the invalid ones do not, compact and spaced. With any_order,
// objects' properties in any order; the invalid ones are also checked in definition order.
void check_case(const Case& c, bool any_order = false) {
    for (int mode = 0; mode < (any_order ? 4 : 2); mode++) {
        const bool compact = mode % 2 == 0, in_order = mode >= 2;
        CAPTURE(c.schema);
        CAPTURE(compact);
        CAPTURE(any_order && !in_order);
        SchemaGrammar g(c.schema, compact, any_order && !in_order);
        REQUIRE_MESSAGE(g.result == GPT2_OK, g.err.message);
        for (const char* v : in_order ? std::vector<const char*>() : c.valid) {
            const std::string text = compact ? compact_json(v) : spaced_json(compact_json(v));
            CAPTURE(text);
            CHECK(grammar_match(g.grammar, text) == GPT2_MATCH_COMPLETE);
            if (!compact) CHECK(grammar_match(g.grammar, compact_json(v)) == GPT2_MATCH_COMPLETE);
        }
        for (const char* v : c.invalid) {
            for (const std::string& text : {compact_json(v), spaced_json(compact_json(v))}) {
                CAPTURE(text);
                CHECK(grammar_match(g.grammar, text) != GPT2_MATCH_COMPLETE);
            }
        }
    }
}

std::string refusal(const std::string& schema) {
    SchemaGrammar g(schema, false);
    CHECK(g.result == GPT2_ERROR_BAD_GRAMMAR);
    CHECK(g.grammar == nullptr);
    return g.err.message;
}

} // namespace

TEST_CASE("json schema: types, properties, required and additionalProperties") {
    REQUIRE(bpe_model().model);
    check_case({R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name"],"additionalProperties":false})",
                {R"({"name":"Ann"})", R"({"name":"Ann","age":30})", R"({"name":"","age":-7})", R"({"name":"\u00e9\"x"})"},
                {R"({})", R"({"age":30})", R"({"name":1})", R"({"name":"Ann","age":1.5})", R"({"name":"Ann","x":1})", R"({"name":"Ann","age":"30"})",
                 R"([])", R"("Ann")", R"({"name":"Ann","name":"Bob"})", R"({"name":"Ann")"}});
    // additionalProperties absent: any other key, any value; the known keys keep their schemas
    check_case({R"({"type":"object","properties":{"a":{"type":"boolean"}}})",
                {R"({})", R"({"a":true})", R"({"b":[1,{"c":null}]})", R"({"a":false,"ab":1,"":2})", R"({"b":1,"c":2})"},
                {R"({"a":1})", R"({"a":true,"a":false})", R"({"b":1,"a":1})", R"(null)"}});
    check_case({R"({"type":"object","additionalProperties":{"type":"number"}})",
                {R"({})", R"({"x":1.5e3,"y":-0.25})"},
                {R"({"x":"1"})", R"({"x":01})"}});
    check_case({R"({"type":["string","null"]})", {R"("x")", R"(null)"}, {R"(1)", R"(true)", R"({})"}});
    check_case({R"(true)", {R"(1)", R"({"a":[]})", R"("s")"}, {R"({"a":})"}});
    check_case({R"({})", {R"(1)", R"(null)"}, {R"(nul)"}});
    // no type: properties apply to objects only, every other type passes
    check_case({R"({"properties":{"a":{"type":"string"}},"required":["a"]})", {R"({"a":"x"})", R"(3)", R"("s")"}, {R"({"a":3})", R"({})"}});
}

TEST_CASE("json schema: arrays, tuples and their lengths") {
    REQUIRE(bpe_model().model);
    check_case({R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
                {R"([1])", R"([1,2,3])"},
                {R"([])", R"([1,2,3,4])", R"([1,"a"])", R"([1.5])"}});
    check_case({R"({"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}],"items":false})",
                {R"([])", R"(["a"])", R"(["a",true])"},
                {R"([true])", R"(["a",true,1])", R"(["a","b"])"}});
    check_case({R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"null"},"minItems":2})",
                {R"(["a",null])", R"(["a",null,null])"},
                {R"(["a"])", R"(["a","b"])", R"([])"}});
    check_case({R"({"type":"array","items":[{"const":1},{"const":2}],"additionalItems":false})", {R"([1,2])", R"([1])", R"([])"}, {R"([1,2,3])", R"([2])"}});
    check_case({R"({"type":"array","maxItems":0})", {R"([])"}, {R"([1])"}});
}

TEST_CASE("json schema: enum, const, anyOf, oneOf, allOf and $ref") {
    REQUIRE(bpe_model().model);
    check_case({R"({"enum":["red","green",3,null,{"a":[1]}]})", {R"("red")", R"("green")", R"(3)", R"(null)", R"({"a":[1]})"}, {R"("blue")", R"(4)", R"("re")", R"({"a":[2]})"}});
    check_case({R"({"type":"string","enum":["a",1]})", {R"("a")"}, {R"(1)"}});
    check_case({R"({"const":"x\ny"})", {R"("x\ny")"}, {R"("xy")"}});
    // a number is its value: 2, 2.0 and 2.00 are one (JSON Schema compares numbers by value); -0 is 0;
    // a value with an exponent is also taken as the schema writes it
    check_case({R"({"enum":[2.0,-0,1e2,3.50,-1.25]})", {"2", "2.0", "2.00", "0", "-0", "0.0", "1e2", "100", "100.0", "3.5", "3.50", "-1.25", "-1.250"},
                {"20", "2.01", "3", "1e3", "3.05", "-1.2", "-0.1", "1", "1E2", "02"}});
    // beside enum and const: the keywords that drop values (lengths in code points, number bounds)
    check_case({R"({"enum":["a","\u00e9\u00e9","abcd",5,2.5,-1,null],"minLength":2,"maxLength":3,"exclusiveMinimum":-1,"maximum":2.5})",
                {"\"\xc3\xa9\xc3\xa9\"", R"(2.5)", R"(null)"}, {R"("a")", R"("abcd")", R"(-1)", R"(5)"}});
    check_case({R"({"type":"integer","enum":[5,2.5,-1],"minimum":0})", {"5"}, {"2.5", "-1"}});
    CHECK(refusal(R"({"enum":["a"],"pattern":"a"})") ==
          "json schema: /pattern: 'pattern' beside enum is not enforced (only the keywords that keep or drop each value: type, lengths, bounds, multipleOf, counts, required, enum, const)");
    // enums and consts beside each other keep the values both have; counts, required and
    // multipleOf keep or drop values too
    check_case({R"({"enum":[1,"a",[1,2],{"k":1},{"k":1,"j":2},null],"allOf":[{"enum":[1.0,"a",[1,2],{"k":1},{"j":2,"k":1}]},{"not":{"const":"a"}}],"required":["j"],"minItems":2})",
                {"1", "1.0", "[1,2]", R"({"k":1,"j":2})", R"({"j":2,"k":1})"}, {R"("a")", "null", R"({"k":1})", "[1]"}});
    check_case({R"({"type":"integer","enum":[0,3,4,6,7.5,9],"multipleOf":3})", {"0", "3", "6", "9"}, {"4", "7.5"}});
    CHECK(refusal(R"({"enum":[1],"minLength":-1})").find("/minLength") != std::string::npos);
    CHECK(refusal(R"({"enum":[1e400],"minimum":0})") == "json schema: /enum: a number beside bounds must have at most 18 digits before its point and 64 after");
    check_case({R"({"const":{"a":[1.0,0.5]}})", {R"({"a":[1,0.5]})", R"({"a":[1.0,0.50]})"}, {R"({"a":[1,0.4]})", R"({"a":[2,0.5]})"}});
    // an object of const or enum in any key order (JSON Schema compares objects whatever the order)
    check_case({R"({"const":{"a":1,"b":{"c":true,"d":null},"e":"x"}})",
                {R"({"a":1,"b":{"c":true,"d":null},"e":"x"})", R"({"e":"x","a":1,"b":{"d":null,"c":true}})", R"({"b":{"c":true,"d":null},"e":"x","a":1.0})"},
                {R"({"a":1,"b":{"c":true,"d":null}})", R"({"a":1,"a":1,"b":{"c":true,"d":null},"e":"x"})", R"({"a":1,"b":{"c":true,"d":null},"e":"x","f":0})"}});
    check_case({R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":2}]})", {R"(1)", R"("ab")"}, {R"("abc")", R"(1.5)", R"(null)"}});
    check_case({R"({"oneOf":[{"type":"integer"},{"type":"string"}]})", {R"(1)", R"("ab")"}, {R"(null)"}});
    // a tagged union: objects told apart by a required property's const
    check_case({R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]},{"$ref":"#/$defs/sq"}],"$defs":{"sq":{"type":"object","properties":{"kind":{"enum":["square","box"]},"side":{"type":"integer"}},"required":["kind"]}}})",
                {R"({"kind":"circle","r":1.5})", R"({"kind":"box","side":2})", R"({"kind":"square"})"}, {R"({"kind":"circle"})", R"({"kind":"tri"})", R"({"r":1})"}});
    // branches that overlap: each with the complements of the others (exactly one holds)
    check_case({R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}},"required":["k"]},{"type":"object","properties":{"k":{"enum":["b","a"]}},"required":["k"]}]})",
                {R"({"k":"b"})", R"({"k":"b","z":1})"}, {R"({"k":"a"})", R"({})", R"({"k":"c"})", "1"}});
    // branches of values no other branch has: const, enum (2, 2.0 and 2e0 are one number)
    check_case({R"({"oneOf":[{"const":"auto","description":"d"},{"const":"crlf"},{"enum":["lf",null,false]}]})",
                {R"("auto")", R"("crlf")", R"("lf")", R"(null)", R"(false)"}, {R"("cr")", R"(true)", R"(1)"}});
    check_case({R"({"type":"number","oneOf":[{"enum":[1,2.5]},{"const":-3}]})", {R"(1)", R"(2.5)", R"(-3)"}, {R"(2)", R"(3)"}});
    check_case({R"({"oneOf":[{"enum":["a","b"]},{"const":"b"}]})", {R"("a")"}, {R"("b")", R"("c")", "1"}});
    check_case({R"({"oneOf":[{"enum":[2,3]},{"const":2.0}]})", {"3", "3.0"}, {"2", "2.0", "2.00", "4"}});
    check_case({R"({"oneOf":[{"const":[1]},{"const":[2]},{"enum":[[1],{"a":[1]}]}]})", {"[2]", R"({"a":[1]})", R"({"a":[1.0]})"}, {"[1]", "[3]", "[]", R"({"a":[1],"b":1})"}});
    check_case({R"({"oneOf":[{"type":"integer"},{"minimum":2}]})", {"1", "-7", R"("x")", "null"}, {"2", "3", "2.0", "1.5"}});
    CHECK(refusal(R"({"oneOf":[{"enum":[1]},{"const":1e0}]})") == "json schema: no value matches the schema (false, or its constraints contradict each other)");
    CHECK(refusal(R"({"oneOf":[{"pattern":"a"},{"maxLength":2}]})").find("/oneOf: 'oneOf' is enforced where its branches cannot overlap") != std::string::npos);
    check_case({R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}}},{"required":["a"]}]})", {R"({"a":1})"}, {R"({})", R"({"a":"x"})"}});
    // allOf's parts that each name properties: all of them, and a property both name meets both schemas
    check_case({R"({"allOf":[{"properties":{"a":{"type":"integer","minimum":0},"b":{"type":"string"}}},{"properties":{"a":{"maximum":9},"c":true},"required":["a"]}],"type":"object"})",
                {R"({"a":0})", R"({"a":9,"b":"x","c":[1]})", R"({"a":5,"z":null})"}, {R"({"a":10})", R"({"a":-1})", R"({"b":"x"})", R"({"a":1,"b":2})"}});
    check_case({R"({"allOf":[{"properties":{"a":{"const":1}}},{"properties":{"a":false}}]})", {R"({})", R"({"b":1})"}, {R"({"a":1})"}});
    // one keyword in several parts: the tightest bound, and additionalProperties for the names its
    // own schema does not give (a property another part names is an additional one to it)
    check_case({R"({"allOf":[{"properties":{"a":{"minimum":1,"maxLength":3}}},{"properties":{"a":{"minimum":2,"maxLength":2}}}]})",
                {R"({"a":2})", R"({"a":"ab"})"}, {R"({"a":1})", R"({"a":1.5})", R"({"a":"abc"})"}});
    check_case({R"({"allOf":[{"properties":{"a":{}}},{"properties":{"b":{}},"additionalProperties":false}]})", {R"({})", R"({"b":1})"}, {R"({"a":1})", R"({"c":1})"}});
    check_case({R"({"allOf":[{"properties":{"a":{"type":"integer"}}}],"additionalProperties":{"type":"string"}})", {R"({})", R"({"x":"y"})"}, {R"({"a":1})", R"({"a":"s"})", R"({"x":1})"}});
    check_case({R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/node"})",
                {R"({"v":1,"next":null})", R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})"},
                {R"({"v":1})", R"({"v":1,"next":{"v":2}})", R"({"v":1,"next":{"v":"x","next":null}})"}});
    check_case({R"({"definitions":{"n":{"type":"integer"}},"type":"array","items":{"$ref":"#/definitions/n"}})", {R"([1,2])"}, {R"(["1"])"}});
}

TEST_CASE("json schema: string lengths and integer bounds are exact") {
    REQUIRE(bpe_model().model);
    // a code point is one character: é, an escape, an escaped surrogate pair
    check_case({R"({"type":"string","minLength":2,"maxLength":3})",
                {R"("ab")", R"("abc")", "\"\xc3\xa9x\"", R"("\u00e9x")", R"("a\n")", R"("\ud83d\ude00x")"},
                {R"("a")", R"("abcd")", R"("\ud83d\ude00")", "\"\xf0\x9f\x98\x80\""}});
    const std::vector<std::pair<long, long>> ranges = {{0, 150}, {-40, 40}, {7, 7}, {-1000, -3}, {95, 1234}, {-5, 0}};
    for (const auto& r : ranges) {
        const std::string schema = R"({"type":"integer","minimum":)" + std::to_string(r.first) + R"(,"maximum":)" + std::to_string(r.second) + "}";
        SchemaGrammar g(schema, true);
        REQUIRE_MESSAGE(g.result == GPT2_OK, g.err.message);
        for (long v = -1300; v <= 1300; v++) {
            CAPTURE(schema);
            CAPTURE(v);
            CHECK((grammar_match(g.grammar, std::to_string(v)) == GPT2_MATCH_COMPLETE) == (v >= r.first && v <= r.second));
        }
        CHECK(grammar_match(g.grammar, "007") != GPT2_MATCH_COMPLETE);
    }
    // one bound, and exclusive bounds (draft 6 numbers, draft 4 booleans)
    check_case({R"({"type":"integer","minimum":10})", {"10", "11", "99", "100", "123456789012345678901234567890"}, {"9", "0", "-10", "010"}});
    check_case({R"({"type":"integer","exclusiveMaximum":0})", {"-1", "-123"}, {"0", "1", "-0"}});
    check_case({R"({"type":"integer","minimum":0,"exclusiveMinimum":true})", {"1"}, {"0"}});
}

// A JSON number without an exponent as an integer in units of 10^-20 (at most 15 whole digits
// and 20 fraction digits here): the reference the number bounds are checked against.
__int128 scaled_decimal(const std::string& text) {
    size_t i = text[0] == '-';
    __int128 v = 0;
    for (; i < text.size() && text[i] != '.'; i++) v = v * 10 + (text[i] - '0');
    int fraction_digits = 0;
    if (i < text.size())
        for (i++; i < text.size(); i++, fraction_digits++) v = v * 10 + (text[i] - '0');
    for (; fraction_digits < 20; fraction_digits++) v *= 10;
    return text[0] == '-' ? -v : v;
}

// Bounds as schemas write them (an exponent, trailing zeros, fractions), and the same bounds
// without an exponent for scaled_decimal.
const std::vector<std::string> bound_texts = {"0", "1", "-1", "0.5", "-0.5", "2.25", "-90", "90", "100.0", "1e2", "2.5E-1", "-1.75",
                                              "0.001", "12.340", "999.99", "-0.05", "180", "3.14159", "1.5e1", "-7"};
std::string bound_without_exponent(const std::string& b) { return b == "1e2" ? "100" : b == "2.5E-1" ? "0.25" : b == "1.5e1" ? "15" : b; }

// A schema of `type` with bounds drawn from bound_texts in one of six keyword forms (both
// inclusive, exclusive ones, one side, draft 4 booleans), and whether a number (its text without
// an exponent) lies within them, exactly.
struct RandomBounds {
    std::string schema;
    bool has_lo, has_hi, lo_strict, hi_strict;
    __int128 lo_v, hi_v;
    RandomBounds(const char* type, std::mt19937* rng) {
        const std::string& lo = bound_texts[(*rng)() % bound_texts.size()];
        const std::string& hi = bound_texts[(*rng)() % bound_texts.size()];
        const int kind = (int)((*rng)() % 6);
        lo_strict = kind == 1 || kind == 4, hi_strict = kind == 2 || kind == 4;
        has_lo = kind != 3, has_hi = kind != 5;
        schema = std::string(R"({"type":")") + type + "\"";
        if (has_lo) schema += std::string(lo_strict && kind != 4 ? R"(,"exclusiveMinimum":)" : R"(,"minimum":)") + lo;
        if (has_hi) schema += std::string(hi_strict && kind != 4 ? R"(,"exclusiveMaximum":)" : R"(,"maximum":)") + hi;
        if (kind == 4) schema += R"(,"exclusiveMinimum":true,"exclusiveMaximum":true)";
        schema += "}";
        lo_v = scaled_decimal(bound_without_exponent(lo)), hi_v = scaled_decimal(bound_without_exponent(hi));
    }
    bool holds(const std::string& number) const {
        const __int128 v = scaled_decimal(number);
        return (!has_lo || (lo_strict ? v > lo_v : v >= lo_v)) && (!has_hi || (hi_strict ? v < hi_v : v <= hi_v));
    }
};

// Makes `count` schemas of `type` with RandomBounds and checks that each of `values` is a whole
// sentence exactly when it lies within the bounds; returns how many were made (the others have
// no value between their bounds: refused as contradictory).
int check_random_bounds(const char* type, unsigned seed, int count, const std::vector<std::string>& values) {
    std::mt19937 rng(seed);
    int schemas = 0;
    for (int k = 0; k < count; k++) {
        const RandomBounds b(type, &rng);
        CAPTURE(b.schema);
        bool any = false;
        for (const std::string& v : values) any = any || b.holds(v);
        SchemaGrammar g(b.schema, true);
        if (g.result != GPT2_OK) {
            CHECK(std::string(g.err.message).find("contradictory bounds") != std::string::npos);
            CHECK(!any);
            continue;
        }
        schemas++;
        for (const std::string& v : values) {
            CAPTURE(v);
            CHECK((grammar_match(g.grammar, v) == GPT2_MATCH_COMPLETE) == b.holds(v));
        }
        CHECK(grammar_match(g.grammar, "00") == GPT2_MATCH_NONE);
        CHECK(grammar_match(g.grammar, "1.") != GPT2_MATCH_COMPLETE);
    }
    return schemas;
}

TEST_CASE("json schema: integer bounds that are fractions or have exponents are exact") {
    REQUIRE(bpe_model().model);
    std::vector<std::string> integers;
    for (int v = -200; v <= 200; v++) integers.push_back(std::to_string(v));
    CHECK(check_random_bounds("integer", 5, 200, integers) > 100);
    // two bounds on one side: the tighter holds; of equal ones, the exclusive
    check_case({R"({"type":"integer","minimum":2,"exclusiveMinimum":2.0,"maximum":7.5,"exclusiveMaximum":6})", {"3", "5"}, {"2", "6", "7"}});
    check_case({R"({"type":"number","exclusiveMinimum":-1,"minimum":-1.0,"maximum":1e0,"exclusiveMaximum":1.5})", {"-0.5", "1", "1.0"}, {"-1", "1.2"}});
}

TEST_CASE("json schema: number bounds are exact for numbers written without an exponent") {
    REQUIRE(bpe_model().model);
    // bounds drawn from bound_texts against numbers near them and between them, with and without
    // trailing zeros; -0 is zero
    const std::vector<std::string> numbers = {
        "0", "-0", "0.0", "-0.00", "1", "-1", "0.5", "0.50", "0.4999", "0.5001", "-0.5", "-0.50", "-0.49", "-0.51", "2.25", "2.2500", "2.24",
        "2.26", "2.249999", "2.250001", "-90", "-90.0", "-90.01", "-89.99", "90", "90.000", "90.1", "89.9", "100", "100.00", "100.001",
        "99.999", "0.25", "0.2", "0.3", "-1.75", "-1.7", "-1.8", "-1.750", "0.001", "0.0009", "0.0011", "0.0010", "12.34", "12.3400",
        "12.339", "12.341", "999.99", "999.989", "1000", "-0.05", "-0.04", "-0.06", "180", "180.5", "179", "3.14159", "3.1416", "3.14158",
        "7", "-7", "45.5", "-45.5", "123456", "-123456", "0.000000001", "-0.000000001", "15", "15.0", "14.99", "-7.0", "-6.9"};
    CHECK(check_random_bounds("number", 11, 400, numbers) > 200);
    // an exponent is not written where a bound other than "minimum": 0 holds (the grammar could not compare it)
    check_case({R"({"type":"number","minimum":-1,"maximum":1})", {"0.5", "-1", "1.0", "-0"}, {"1e0", "5e-1", "1.01", "-1.5"}});
    check_case({R"({"type":["number","null"],"exclusiveMinimum":0})", {"0.001", "7", "null"}, {"0", "-0", "0.000", "-3"}});
    CHECK(refusal(R"({"type":"number","minimum":1,"maximum":0.5})") == "json schema: (root): contradictory bounds: no number lies between minimum and maximum, so no value matches the schema");
    CHECK(refusal(R"({"type":"number","minimum":1e400})") == "json schema: /minimum: a number bound must be a number with at most 18 digits before its point and 64 after");
}

TEST_CASE("json schema: formats date, time, date-time and uuid, and keywords beside anyOf and $ref merged") {
    REQUIRE(bpe_model().model);
    check_case({R"({"type":"string","format":"date"})", {R"("2024-02-28")", R"("1999-12-31")", R"("2023-04-30")"},
                {R"("2024-02-30")", R"("2023-04-31")", R"("2023-13-01")", R"("0000-01-01")", R"("2023-1-01")", R"("x")"}});
    check_case({R"({"type":"string","format":"time"})", {R"("23:59:59Z")", R"("08:30:00.123+05:30")"}, {R"("24:00:00Z")", R"("12:60:00Z")", R"("12:00:00")"}});
    check_case({R"({"type":"string","format":"date-time"})", {R"("2024-01-15T10:20:30Z")", R"("2024-01-15T10:20:30.5-08:00")"}, {R"("2024-01-15 10:20:30Z")", R"("2024-01-15T10:20Z")"}});
    check_case({R"({"format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")", R"(5)"}, {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"}});
    check_case({R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"anyOf":[{"required":["a"]},{"$ref":"#/$defs/b"}],"$defs":{"b":{"required":["b"]}}})",
                {R"({"a":1})", R"({"b":"x"})", R"({"a":1,"b":"x"})"}, {R"({})", R"({"c":1})", R"({"a":"x"})", R"(1)"}});
    check_case({R"({"type":["integer","string"],"anyOf":[{"minimum":3},{"type":"string","maxLength":1}]})", {R"(3)", R"(7)", R"("a")", R"("ab")"}, {R"(2)", R"(null)"}});  // "ab": minimum does not apply to strings
    check_case({R"({"$defs":{"p":{"type":"object","properties":{"x":{"type":"integer"}}}},"$ref":"#/$defs/p","required":["x"]})", {R"({"x":1})"}, {R"({})", R"({"x":"1"})"}});
    CHECK(refusal(R"({"type":"string","format":"duration"})") ==
          "json schema: /format: 'format' is enforced only for date, time, date-time, uuid, ipv4, ipv6, hostname, email, uri and uri-reference (formats no draft defines are annotations)");
    // a format no draft defines is an annotation, as validators read it: any string
    check_case({R"({"type":"string","format":"int32"})", {R"("x")", R"("12")"}, {R"(12)", R"(null)"}});
    check_case({R"({"type":"string","format":"slug","pattern":"^[a-z]+$"})", {R"("ab")"}, {R"("a b")", R"("")"}});
}

namespace {

// Checkers written from the RFCs' text, procedurally and apart from the grammars they check: what a
// strict validator accepts for each format.
bool is_alnum(char c) { return std::isalnum((unsigned char)c) != 0; }
bool is_hex(char c) { return std::isxdigit((unsigned char)c) != 0; }
std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> parts(1);
    for (char c : s) {
        if (c == sep) parts.emplace_back();
        else parts.back() += c;
    }
    return parts;
}
bool rfc_ipv4(const std::string& s) {
    const auto parts = split(s, '.');
    if (parts.size() != 4) return false;
    for (const auto& p : parts) {
        if (p.empty() || p.size() > 3 || (p.size() > 1 && p[0] == '0')) return false;
        for (char c : p)
            if (c < '0' || c > '9') return false;
        if (std::stoi(p) > 255) return false;
    }
    return true;
}
// RFC 4291 section 2.2 (RFC 3986's IPv6address): 8 groups of 1-4 hex digits, the last two maybe
// an IPv4 address; one "::" may stand for one group of zeros or more.
bool rfc_ipv6(const std::string& s) {
    const size_t gap = s.find("::");
    if (gap != std::string::npos && s.find("::", gap + 1) != std::string::npos) return false;
    const std::string head = gap == std::string::npos ? s : s.substr(0, gap), tail = gap == std::string::npos ? "" : s.substr(gap + 2);
    int groups = 0;
    for (int k = 0; k < 2; k++) {
        const std::string& side = k == 0 ? head : tail;
        if (side.empty()) continue;
        const auto parts = split(side, ':');
        for (size_t i = 0; i < parts.size(); i++) {
            const std::string& p = parts[i];
            const bool last = (k == 1 || gap == std::string::npos) && i + 1 == parts.size(); // where an IPv4 address may end it
            if (last && p.find('.') != std::string::npos) {
                if (!rfc_ipv4(p)) return false;
                groups += 2;
                continue;
            }
            if (p.empty() || p.size() > 4 || !std::all_of(p.begin(), p.end(), is_hex)) return false;
            groups++;
        }
    }
    return gap == std::string::npos ? groups == 8 : groups <= 7;
}
// RFC 1034/1123: labels of 1-63 letters, digits and hyphens, not starting or ending with one;
// 253 characters at most; the top-level label not all digits. RFC 5891: "--" at a label's third
// and fourth characters is an IDNA A-label ("xn--") or reserved, whose Punycode a strict validator
// checks: none is taken.
bool rfc_hostname(const std::string& s) {
    if (s.empty() || s.size() > 253) return false;
    const auto labels = split(s, '.');
    for (const auto& l : labels) {
        if (l.empty() || l.size() > 63 || l.front() == '-' || l.back() == '-') return false;
        if (l.size() >= 4 && l[2] == '-' && l[3] == '-') return false;
        for (char c : l)
            if (!is_alnum(c) && c != '-') return false;
    }
    const std::string& top = labels.back();
    return std::any_of(top.begin(), top.end(), [](char c) { return !(c >= '0' && c <= '9'); });
}
// RFC 5321: a dot-atom local part of at most 64 characters, '@', a domain of two labels or more;
// 254 characters in all.
bool rfc_email(const std::string& s) {
    const size_t at = s.rfind('@');
    if (at == std::string::npos || s.size() > 254 || at > 64) return false;
    for (const auto& word : split(s.substr(0, at), '.')) {
        if (word.empty()) return false;
        for (char c : word)
            if (!is_alnum(c) && !std::strchr("!#$%&'*+-/=?^_`{|}~", c)) return false;
    }
    const std::string domain = s.substr(at + 1);
    return rfc_hostname(domain) && domain.find('.') != std::string::npos;
}
// RFC 3986: the characters of each part, %HH escapes, an authority after "//" (reg-name host,
// digits for the port), and a path without one never starting with "//". With a scheme: a URI;
// without (uri-reference only), the first segment holds no ':'.
bool rfc_uri(const std::string& s, bool reference) {
    auto pchars = [](const std::string& t, const char* extra) {
        for (size_t i = 0; i < t.size(); i++) {
            const char c = t[i];
            if (c == '%') {
                if (i + 2 >= t.size() || !is_hex(t[i + 1]) || !is_hex(t[i + 2])) return false;
                i += 2;
            } else if (!is_alnum(c) && !std::strchr("-._~!$&'()*+,;=", c) && !std::strchr(extra, c)) {
                return false;
            }
        }
        return true;
    };
    std::string rest = s;
    size_t colon = rest.find(':'), end_of_first = rest.find_first_of("/?#");
    const bool has_scheme = colon != std::string::npos && colon < end_of_first;
    if (has_scheme) {
        const std::string scheme = rest.substr(0, colon);
        if (scheme.empty() || !std::isalpha((unsigned char)scheme[0])) return false;
        for (char c : scheme)
            if (!is_alnum(c) && !std::strchr("+-.", c)) return false;
        rest = rest.substr(colon + 1);
    } else if (!reference) {
        return false;
    }
    const size_t hash = rest.find('#');
    if (hash != std::string::npos) {
        if (!pchars(rest.substr(hash + 1), ":@/?")) return false;
        rest = rest.substr(0, hash);
    }
    const size_t question = rest.find('?');
    if (question != std::string::npos) {
        if (!pchars(rest.substr(question + 1), ":@/?")) return false;
        rest = rest.substr(0, question);
    }
    std::string path = rest;
    if (rest.compare(0, 2, "//") == 0) {
        const size_t slash = rest.find('/', 2);
        std::string authority = rest.substr(2, slash == std::string::npos ? std::string::npos : slash - 2);
        path = slash == std::string::npos ? "" : rest.substr(slash);
        const size_t port = authority.rfind(':');
        if (port != std::string::npos) {
            for (char c : authority.substr(port + 1))
                if (c < '0' || c > '9') return false;
            authority = authority.substr(0, port);
        }
        if (!pchars(authority, "")) return false;
    } else if (path.compare(0, 2, "//") == 0) {
        return false;
    }
    if (!has_scheme && path.find(':') < path.find('/')) return false;
    return pchars(path, ":@/");
}

// A random string of the grammar's language, one character at a time (those that keep it a
// prefix, from the characters formats use), ending where it is whole with probability 1/4.
std::string draw_from(const gpt2_grammar* g, std::mt19937& rng) {
    static const std::string alphabet = "aZz09.-:/?#@%_~!$&'()*+,;=TF";
    std::string text = "\"";
    while (text.size() < 300) {
        std::vector<char> next;
        for (char c : alphabet)
            if (grammar_match(g, text + c) != GPT2_MATCH_NONE) next.push_back(c);
        const bool whole = grammar_match(g, text + "\"") == GPT2_MATCH_COMPLETE;
        if (next.empty() || (whole && rng() % 4 == 0)) return whole ? text + "\"" : "";
        text += next[rng() % next.size()];
    }
    return "";
}

} // namespace

TEST_CASE("json schema: formats ipv4, ipv6, hostname, email, uri and uri-reference hold strings a strict validator accepts") {
    REQUIRE(bpe_model().model);
    check_case({R"({"format":"ipv4"})", {R"("0.0.0.0")", R"("255.255.255.255")", R"("192.168.1.10")"},
                {R"("256.1.1.1")", R"("1.2.3")", R"("01.2.3.4")", R"("1.2.3.4.5")", R"("1.2.3.")"}});
    check_case({R"({"format":"ipv6"})",
                {R"("2001:db8:0:0:0:0:2:1")", R"("FFFF:0:0:0:0:0:0:1")", R"("2001:db8::1")", R"("::")", R"("::1")", R"("fe80::")", R"("1:2:3:4:5:6:7::")",
                 R"("::1:2:3:4:5:6:7")", R"("::ffff:192.0.2.1")", R"("1:2:3:4:5:6:1.2.3.4")", R"("64:ff9b::10.0.0.1")"},
                {R"("1:2:3:4:5:6:7")", R"("12345:0:0:0:0:0:0:1")", R"("1::2::3")", R"(":::")", R"("1:2:3:4:5:6:7:8::")", R"("::1:2:3:4:5:6:7:8")",
                 R"("1:2:3:4:5:6:7:1.2.3.4")", R"("::1.2.3.256")", R"("1.2.3.4::")", R"(":1::")", R"("1:")"}});
    check_case({R"({"format":"hostname"})", {R"("localhost")", R"("www.example.com")", R"("a-1.b2")", R"("a--b.com")", R"("abc-d.e--f")"},
                {R"("-a.com")", R"("a-.com")", R"("a..com")", R"("example.123")", R"("a_b.com")", R"("")", R"("xn--x.com")", R"("ab--c.org")", R"("www.XN--aa-b")"}});
    check_case({R"({"type":"string","format":"email"})", {R"("ann@example.com")", R"("first.last+tag@mail.example.org")", R"("o'neil!#$@x.io")"},
                {R"("ann")", R"("ann@localhost")", R"("ann@@x.com")", R"(".ann@x.com")", R"("ann.@x.com")", R"("a..b@x.com")", R"("ann@x.123")"}});
    check_case({R"({"format":"uri"})",
                {R"("https://example.com/a/b?x=1&y=2#top")", R"("http://localhost:8080")", R"("mailto:ann@example.com")", R"("urn:isbn:0451450523")",
                 R"("file:///etc/hosts")", R"("x:")", R"("https://ex.com/%20a")"},
                {R"("example.com")", R"("/a/b")", R"("1http://x")", R"("http://x:8a")", R"("http://x/a b")", R"("http://x/%2")", R"("")"}});
    check_case({R"({"format":"uri-reference"})", {R"("https://example.com/")", R"("/a/b?c")", R"("../x")", R"("#frag")", R"("")", R"("//host/p")"},
                {R"("a b")", R"("a:b c")", R"("%zz")"}});

    // strings drawn at random from each grammar pass the RFC checkers above
    std::mt19937 rng(5);
    const std::pair<const char*, bool (*)(const std::string&)> formats[] = {
        {"ipv4", rfc_ipv4}, {"ipv6", rfc_ipv6}, {"hostname", rfc_hostname}, {"email", rfc_email},
        {"uri", [](const std::string& s) { return rfc_uri(s, false); }}, {"uri-reference", [](const std::string& s) { return rfc_uri(s, true); }}};
    for (const auto& entry : formats) {
        const char* format = entry.first;  // not a structured binding: clang 14 cannot capture one (CAPTURE)
        SchemaGrammar g(std::string(R"({"format":")") + format + "\"}", true);
        REQUIRE_MESSAGE(g.result == GPT2_OK, g.err.message);
        int drawn = 0;
        for (int i = 0; i < 40; i++) {
            const std::string text = draw_from(g.grammar, rng);
            if (text.empty()) continue;
            drawn++;
            CAPTURE(format);
            CAPTURE(text);
            CHECK(entry.second(text.substr(1, text.size() - 2)));
        }
        CHECK(drawn >= 30);
    }
}

TEST_CASE("json schema: patternProperties with additionalProperties false, or a pattern that matches every name") {
    REQUIRE(bpe_model().model);
    // closed: every key matches the pattern (unanchored unless written with ^ and $), its value the schema
    check_case({R"({"type":"object","patternProperties":{"^[a-z]+$":{"type":"integer"}},"additionalProperties":false})",
                {R"({})", R"({"ab":1})", R"({"a":1,"zz":-2})"},
                {R"({"A":1})", R"({"ab":"1"})", R"({"":1})", R"({"a1":1})", R"({"a":1,"B":2})", R"([])"}});
    check_case({R"({"type":"object","patternProperties":{"^x-":{"type":"string"}},"additionalProperties":false})",
                {R"({"x-a":"s"})", R"({"x-":""})"},
                {R"({"y-a":"s"})", R"({"ax-":"s"})", R"({"x-a":1})"}});
    check_case({R"({"patternProperties":{"[0-9]{2,}":{"type":"boolean"}},"additionalProperties":false})",
                {R"({"a12b":true})", R"({"99":false})", R"(3)"}, // unanchored: the digits may sit anywhere; not an object: passes
                {R"({"a1b":true})", R"({"12":1})"}});
    // a pattern that matches every name: every extra value has its schema, the required ones too
    check_case({R"({"type":"object","patternProperties":{".*":{"type":"number"}},"required":["a"]})",
                {R"({"a":1})", R"({"a":1,"b":2.5,"":0})"},
                {R"({})", R"({"a":"x"})", R"({"a":1,"b":null})"}});
    check_case({R"({"type":"object","patternProperties":{"":{"type":"null"}},"additionalProperties":false})",
                {R"({})", R"({"k":null})"},
                {R"({"k":0})"}});
    // the forms a key could meet two schemas in are refused
    CHECK(refusal(R"({"type":"object","patternProperties":{"^a":{},"^b":{}},"additionalProperties":false})") ==
          "json schema: /patternProperties: 'patternProperties' is enforced only with one pattern");
    CHECK(refusal(R"({"type":"object","patternProperties":{"^a":{"type":"integer"}}})") ==
          "json schema: /patternProperties: 'patternProperties' is enforced only with additionalProperties false, or with a pattern that matches every name (\"\" or \".*\")");
    CHECK(refusal(R"({"type":"object","patternProperties":{"^a":{}},"additionalProperties":{"type":"string"}})").find("is enforced only with additionalProperties false") !=
          std::string::npos);
    CHECK(refusal(R"({"type":"object","properties":{"ab":{}},"patternProperties":{"^a":{}},"additionalProperties":false})") ==
          "json schema: /patternProperties: 'patternProperties' with additionalProperties false is enforced only without 'properties' and 'required'");
    CHECK(refusal(R"({"type":"object","required":["ab"],"patternProperties":{"^a":{}},"additionalProperties":false})").find("without 'properties' and 'required'") !=
          std::string::npos);
    CHECK(refusal(R"({"type":"object","properties":{"a":{}},"patternProperties":{".*":{}}})") ==
          "json schema: /patternProperties: 'patternProperties' beside 'properties' is not enforced");
    CHECK(refusal(R"J({"type":"object","patternProperties":{"a(?=b)":{}},"additionalProperties":false})J") ==
          "json schema: /patternProperties: 'patternProperties' is not enforced: lookaround is not enforced");
    CHECK(refusal(R"({"allOf":[{"patternProperties":{".*":{}}},{"additionalProperties":false}]})").find("'patternProperties' is enforced only with additionalProperties false") != std::string::npos);
    CHECK(refusal(R"({"type":"object","patternProperties":[]})") == "json schema: /patternProperties: patternProperties must be an object");
}

TEST_CASE("json schema: minProperties, dependencies, propertyNames, contains, not, if, oneOf, multipleOf, unevaluated*, anchors are enforced exactly") {
    REQUIRE(bpe_model().model);
    // the valid and invalid instances as Python's jsonschema reads them (Draft202012Validator,
    // Draft7Validator for dependencies); objects in any order, and the invalid ones in definition
    // order too
    // minProperties counts an extra key once at most (a key written twice is one key to a JSON reader)
    check_case({R"J({"properties":{"a":true,"b":{"type":"integer"}},"minProperties":2})J", {R"J({"a":1,"x":2})J", R"J({"a":1,"b":2})J", R"J({"b":1,"x":null})J"},
                {R"J({"x":1,"x":2})J", R"J({"a":1})J", R"J({"a":1,"a":2})J", R"J({})J"}}, true);
    CHECK(refusal(R"({"type":"object","minProperties":2})") ==
          "json schema: /minProperties: 'minProperties' is held up to the properties the schema names and one more (two other keys may be one written twice): here 1, so the grammar holds no value of the schema");
    CHECK(refusal(R"({"type":"object","properties":{"a":true},"additionalProperties":false,"minProperties":2})") ==
          "json schema: /minProperties: contradictory bounds: minProperties is more than the properties the object may have, so no value matches the schema");
    check_case({R"J({"type":"object","minProperties":1,"maxProperties":2})J",
                {R"J({"a":1})J", R"J({"a":1,"b":2})J"},
                {R"J({})J", R"J({"a":1,"b":2,"c":3})J"}}, true);
    check_case({R"J({"properties":{"a":{"type":"integer"},"b":true},"required":["a"],"maxProperties":2})J",
                {R"J({"a":1})J", R"J({"a":1,"b":2})J", R"J({"a":1,"c":[]})J", R"J("x")J"},
                {R"J({"a":1,"b":2,"c":3})J", R"J({"b":1})J"}}, true);
    check_case({R"J({"type":"object","properties":{"a":true,"b":true},"additionalProperties":false,"minProperties":2})J",
                {R"J({"a":1,"b":2})J"},
                {R"J({"a":1})J", R"J({})J"}}, true);
    check_case({R"J({"dependentRequired":{"a":["b"],"c":["a","b"]}})J",
                {R"J({})J", R"J({"b":1})J", R"J({"a":1,"b":2})J", R"J({"c":1,"a":1,"b":1})J", R"J(5)J"},
                {R"J({"a":1})J", R"J({"c":1,"a":1})J", R"J({"c":1})J"}}, true);
    check_case({R"J({"dependentSchemas":{"a":{"properties":{"b":{"type":"integer"}},"required":["b"]}}})J",
                {R"J({"b":"x"})J", R"J({"a":1,"b":2})J", R"J({})J"},
                {R"J({"a":1})J", R"J({"a":1,"b":"x"})J"}}, true);
    check_case({R"J({"dependencies":{"a":["b"],"b":{"maxProperties":1}}})J",
                {R"J({"b":1})J", R"J({})J", R"J({"c":1,"d":2})J"},
                {R"J({"a":1})J", R"J({"a":1,"b":1})J", R"J({"b":1,"c":2})J"}}, true);
    check_case({R"J({"propertyNames":{"maxLength":2}})J",
                {R"J({})J", R"J({"ab":1,"c":[]})J", R"J(1)J"},
                {R"J({"abc":1})J"}}, true);
    check_case({R"J({"propertyNames":{"enum":["a","b"]},"properties":{"a":{"type":"integer"}}})J",
                {R"J({"a":1})J", R"J({"b":"x"})J", R"J({"a":1,"b":2})J"},
                {R"J({"c":1})J", R"J({"a":"x"})J"}}, true);
    check_case({R"J({"propertyNames":{"pattern":"^x"},"additionalProperties":{"type":"integer"}})J",
                {R"J({"xa":1})J", R"J({})J"},
                {R"J({"ya":1})J", R"J({"xa":"s"})J"}}, true);
    check_case({R"J({"type":"object","propertyNames":false})J",
                {R"J({})J"},
                {R"J({"a":1})J"}}, true);
    check_case({R"J({"type":"array","items":{"type":"integer"},"contains":{"minimum":5}})J",
                {R"J([5])J", R"J([1,7,2])J"},
                {R"J([])J", R"J([1,2])J", R"J([1,"x",9])J"}}, true);
    check_case({R"J({"contains":{"const":1},"minContains":2,"maxContains":3})J",
                {R"J([1,1])J", R"J([1,2,1,1])J", R"J("s")J", R"J([1,1,2])J"},
                {R"J([1])J", R"J([1,1,1,1])J", R"J([2,2])J"}}, true);
    check_case({R"J({"contains":{"type":"string"},"maxContains":0,"minContains":0})J",
                {R"J([])J", R"J([1,2])J"},
                {R"J(["a"])J", R"J([1,"a"])J"}}, true);
    check_case({R"J({"not":{"type":"integer"}})J",
                {R"J("x")J", R"J(1.5)J", R"J(null)J"},
                {R"J(1)J", R"J(-3)J", R"J(2.0)J"}}, true);
    check_case({R"J({"not":{"enum":["a",1,null]}})J",
                {R"J("b")J", R"J(2)J", R"J(true)J", R"J([])J", R"J({})J"},
                {R"J("a")J", R"J(1)J", R"J(1.0)J", R"J(null)J"}}, true);
    check_case({R"J({"type":"object","properties":{"a":{"not":{"minimum":3}}}})J",
                {R"J({"a":2})J", R"J({"a":-1.5})J", R"J({})J"},
                {R"J({"a":3})J", R"J({"a":10})J", R"J({"a":"x"})J"}}, true);
    check_case({R"J({"not":{"required":["a"]}})J",
                {R"J({})J", R"J({"b":1})J"},
                {R"J({"a":1})J", R"J("x")J"}}, true);
    check_case({R"J({"not":{"properties":{"a":{"type":"string"}}}})J",
                {R"J({"a":1})J"},
                {R"J({})J", R"J({"a":"x"})J", R"J(1)J", R"J("s")J"}}, true);
    check_case({R"J({"not":{"items":{"type":"integer"}}})J",
                {R"J(["x"])J", R"J([1,"x"])J"},
                {R"J([])J", R"J([1,2])J", R"J(5)J"}}, true);
    check_case({R"J({"not":{"anyOf":[{"type":"string"},{"minimum":3}]}})J",
                {R"J(1)J", R"J(2.5)J"},
                {R"J("s")J", R"J(3)J", R"J(7)J", R"J(null)J", R"J([])J"}}, true);
    check_case({R"J({"if":{"properties":{"kind":{"const":"circle"}},"required":["kind"]},"then":{"required":["r"]},"else":{"required":["side"]}})J",
                {R"J({"kind":"circle","r":1})J", R"J({"kind":"square","side":2})J", R"J({"side":1})J"},
                {R"J({"kind":"circle"})J", R"J({"kind":"square"})J", R"J({"kind":"circle","side":1})J"}}, true);
    check_case({R"J({"type":"integer","if":{"minimum":10},"then":{"multipleOf":5,"maximum":30},"else":{"maximum":3}})J",
                {R"J(10)J", R"J(15)J", R"J(3)J", R"J(-7)J"},
                {R"J(12)J", R"J(5)J", R"J(4)J", R"J(35)J"}}, true);
    check_case({R"J({"if":{"type":"string"},"then":{"maxLength":2}})J",
                {R"J("ab")J", R"J(5)J", R"J([1,2,3])J"},
                {R"J("abc")J"}}, true);
    check_case({R"J({"type":"object","oneOf":[{"required":["a"]},{"required":["b"]}]})J",
                {R"J({"a":1})J", R"J({"b":1})J"},
                {R"J({})J", R"J({"a":1,"b":2})J"}}, true);
    check_case({R"J({"type":"integer","multipleOf":3})J",
                {R"J(0)J", R"J(3)J", R"J(-12)J", R"J(999)J"},
                {R"J(1)J", R"J(10)J", R"J(-4)J"}}, true);
    check_case({R"J({"type":"number","multipleOf":0.5})J",
                {R"J(0)J", R"J(1.5)J", R"J(-2)J", R"J(2.50)J"},
                {R"J(0.25)J", R"J(1.1)J"}}, true);
    check_case({R"J({"type":"integer","multipleOf":5,"minimum":0})J",
                {R"J(0)J", R"J(5)J", R"J(100)J"},
                {R"J(-5)J", R"J(3)J"}}, true);
    check_case({R"J({"type":"integer","multipleOf":4,"minimum":-10,"exclusiveMaximum":12})J",
                {R"J(-8)J", R"J(0)J", R"J(8)J"},
                {R"J(-12)J", R"J(12)J", R"J(2)J"}}, true);
    check_case({R"J({"type":"number","not":{"multipleOf":2}})J",
                {R"J(1)J", R"J(3.5)J", R"J(0.1)J"},
                {R"J(2)J", R"J(4.0)J", R"J(0)J"}}, true);
    check_case({R"J({"type":"object","allOf":[{"properties":{"a":true}}],"properties":{"b":true},"unevaluatedProperties":false})J",
                {R"J({"a":1,"b":2})J", R"J({})J"},
                {R"J({"c":1})J", R"J({"a":1,"c":2})J"}}, true);
    check_case({R"J({"$defs":{"base":{"properties":{"a":{"type":"integer"}}}},"$ref":"#/$defs/base","unevaluatedProperties":{"type":"string"}})J",
                {R"J({"a":1,"x":"s"})J"},
                {R"J({"a":1,"x":2})J"}}, true);
    check_case({R"J({"type":"object","if":{"properties":{"a":{"const":1}},"required":["a"]},"then":{"properties":{"b":true}},"else":{},"unevaluatedProperties":false})J",
                {R"J({"a":1,"b":2})J", R"J({"a":1})J"},
                {R"J({"a":2})J", R"J({"a":1,"c":3})J"}}, true);
    check_case({R"J({"prefixItems":[{"type":"integer"}],"unevaluatedItems":false})J",
                {R"J([1])J", R"J([])J"},
                {R"J([1,2])J"}}, true);
    check_case({R"J({"allOf":[{"prefixItems":[true,true]}],"unevaluatedItems":{"type":"string"}})J",
                {R"J([1,2,"x"])J", R"J([1])J"},
                {R"J([1,2,3])J"}}, true);
    check_case({R"J({"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"n":{"$anchor":"num","type":"number"}},"items":{"$ref":"#num"}})J",
                {R"J([1,2.5])J"},
                {R"J(["x"])J"}}, true);
    check_case({R"J({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"http://example.com/root.json","$defs":{"a":{"$id":"other.json","$defs":{"b":{"type":"string"}},"$ref":"#/$defs/b"}},"$ref":"other.json"})J",
                {R"J("x")J"},
                {R"J(1)J"}}, true);
    check_case({R"J({"$schema":"https://json-schema.org/draft/2020-12/schema","$dynamicAnchor":"meta","type":"object","properties":{"child":{"$dynamicRef":"#meta"}}})J",
                {R"J({"child":{"child":{}}})J"},
                {R"J({"child":1})J"}}, true);
    check_case({R"J({"properties":{"foo\nbar":{"type":"integer"},"foo\"bar":{"type":"string"}},"required":["foo\nbar"]})J",
                {R"J({"foo\nbar":1})J", R"J({"foo\nbar":1,"foo\"bar":"x"})J"},
                {R"J({})J", R"J({"foo\nbar":"x"})J"}}, true);
    // draft 7's "$id": "#name" is an anchor
    check_case({R"J({"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"n":{"$id":"#num","type":"number"}},"items":{"$ref":"#num"}})J", {"[1,2.5]"}, {R"J(["x"])J"}});
}

TEST_CASE("json schema: options any_order and integer_fraction accept the objects and integers JSON Schema does") {
    REQUIRE(bpe_model().model);
    const std::string closed = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":true},"required":["a","b"],"additionalProperties":false})";
    for (bool compact : {true, false}) {
        SchemaGrammar any(closed, compact, true), ordered(closed, compact, false);
        REQUIRE(any.result == GPT2_OK);
        for (const char* v : {R"({"a":1,"b":"x"})", R"({"b":"x","a":1})", R"({"c":null,"b":"x","a":1})", R"({"b":"x","c":[],"a":-2})"}) {
            CAPTURE(v);
            CHECK(grammar_match(any.grammar, compact ? compact_json(v) : spaced_json(v)) == GPT2_MATCH_COMPLETE);
            CHECK((grammar_match(ordered.grammar, compact ? compact_json(v) : spaced_json(v)) == GPT2_MATCH_COMPLETE) == (std::string(v).find("\"a\"") == 1));
        }
        for (const char* v : {R"({"a":1})", R"({"b":"x","a":1,"a":2})", R"({"b":"x","a":1,"d":0})", R"({"b":"x","a":"1"})"}) {
            CAPTURE(v);
            CHECK(grammar_match(any.grammar, compact ? compact_json(v) : spaced_json(v)) != GPT2_MATCH_COMPLETE);
        }
    }
    // extra properties among the named ones, each name at most once
    SchemaGrammar open(R"({"properties":{"a":true,"b":true},"required":["a"],"minProperties":2})", true, true);
    REQUIRE(open.result == GPT2_OK);
    for (const char* v : {R"({"x":1,"a":1})", R"({"b":1,"x":2,"a":3})", R"({"a":1,"b":2})"}) CHECK(grammar_match(open.grammar, v) == GPT2_MATCH_COMPLETE);
    for (const char* v : {R"({"b":1,"x":2})", R"({"a":1})", R"({"a":1,"a":2})", R"({"x":1,"a":2,"a":3})"}) CHECK(grammar_match(open.grammar, v) != GPT2_MATCH_COMPLETE);
    // past the states any order may take: definition order
    std::string many = R"({"properties":{)";
    for (int i = 0; i < 12; i++) many += (i ? "," : "") + std::string("\"p") + std::to_string(i) + "\":true";
    many += "}}";
    SchemaGrammar big(many, true, true);
    REQUIRE(big.result == GPT2_OK);
    CHECK(grammar_match(big.grammar, R"({"p0":1,"p11":2})") == GPT2_MATCH_COMPLETE);
    CHECK(grammar_match(big.grammar, R"({"p11":1,"p0":2})") != GPT2_MATCH_COMPLETE);
    // integers with a fraction of zeros
    const Case integers[] = {{R"({"type":"integer"})", {"4", "4.0", "4.000", "-0.0", "-7.00"}, {"4.5", "4.", "4.01", "4e0"}},
                             {R"({"type":"integer","minimum":-3,"maximum":40})", {"4", "4.0", "40.00", "-3.0"}, {"4.5", "41.0", "-4.0"}},
                             {R"({"type":"integer","multipleOf":4})", {"4", "4.0", "-8.00", "0.0"}, {"5.0", "4.01", "2.0"}}};
    for (const Case& c : integers) {
        CAPTURE(c.schema);
        SchemaGrammar with(c.schema, true, false, true), without(c.schema, true);
        REQUIRE(with.result == GPT2_OK);
        for (const char* v : c.valid) {
            CAPTURE(v);
            CHECK(grammar_match(with.grammar, v) == GPT2_MATCH_COMPLETE);
            CHECK((grammar_match(without.grammar, v) == GPT2_MATCH_COMPLETE) == (std::string(v).find('.') == std::string::npos));
        }
        for (const char* v : c.invalid) CHECK(grammar_match(with.grammar, v) != GPT2_MATCH_COMPLETE);
    }
    // draft 4's integer is a number without a fraction: 1.0 is none, the option or not
    for (const char* schema : {R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"integer"})",
                               R"({"$schema":"http://json-schema.org/draft-04/schema#","type":"integer","enum":[1,2.0,3e0]})"}) {
        CAPTURE(schema);
        SchemaGrammar with(schema, true, false, true);
        REQUIRE(with.result == GPT2_OK);
        CHECK(grammar_match(with.grammar, "1") == GPT2_MATCH_COMPLETE);
        for (const char* v : {"1.0", "2.0", "3e0", "1.00"}) CHECK(grammar_match(with.grammar, v) != GPT2_MATCH_COMPLETE);
    }
}

TEST_CASE("json schema: keywords that are not enforced are refused with their JSON pointer") {
    REQUIRE(bpe_model().model);
    CHECK(refusal(R"({"type":"number","multipleOf":0.0001234567})") == "json schema: /multipleOf: 'multipleOf' is enforced where its digits make at most 2048 states (this one makes 16049371)");
    CHECK(refusal(R"({"type":"integer","multipleOf":7,"minimum":1,"maximum":100000})") ==
          "json schema: /multipleOf: 'multipleOf' beside minimum or maximum is enforced where the bounds hold at most 1024 multiples, or the minimum is 0 alone");
    CHECK(refusal(R"({"not":{"type":"string","pattern":"^a"}})") == "json schema: /not/pattern: the complement of 'pattern' (inside not, if or oneOf) is not enforced");
    CHECK(refusal(R"({"if":{"format":"date"},"then":{"maxLength":3}})") == "json schema: /if/format: the complement of 'format' (inside not, if or oneOf) is not enforced");
    CHECK(refusal(R"({"type":"array","items":{"type":"integer"},"contains":{"const":1},"minItems":2})") == "json schema: /contains: 'contains' beside minItems or maxItems is not enforced");
    CHECK(refusal(R"({"allOf":[{"properties":{"a":true}},{"unevaluatedProperties":false}]})") ==
          "json schema: /allOf/1/unevaluatedProperties: 'unevaluatedProperties' is enforced where it is the schema's own keyword (one inside allOf's part, a branch or a $ref's target sees only its part)");
    CHECK(refusal(R"({"propertyNames":{"maxLength":2},"properties":{"a":true}})") ==
          "json schema: /propertyNames: 'propertyNames' beside 'properties' or 'required' is enforced only as an enum or a const");
    CHECK(refusal(R"({"allOf":[{"pattern":"a"},{"pattern":"b"}]})") == "json schema: /allOf/1/pattern: 'pattern' is written here and at /allOf/0/pattern with another value; both at once are not enforced");
    CHECK(refusal(R"J({"type":"string","pattern":"a(?=b)"})J") == "json schema: /pattern: 'pattern' is not enforced: lookaround is not enforced");
    CHECK(refusal(R"J({"type":"string","pattern":"(a)\\1"})J") == "json schema: /pattern: 'pattern' is not enforced: backreferences are not enforced");
    CHECK(refusal(R"J({"type":"string","pattern":"\\bword"})J") == "json schema: /pattern: 'pattern' is not enforced: word boundaries (\\b) are not enforced");
    CHECK(refusal(R"J({"type":"string","pattern":"a^b"})J") == "json schema: /pattern: 'pattern' is not enforced: '^' and '$' are enforced only at the ends of the pattern");
    CHECK(refusal(R"J({"type":"string","pattern":"(ab"})J") == "json schema: /pattern: 'pattern' is not enforced: a '(' without its ')'");
    CHECK(refusal(R"J({"type":"string","pattern":"a{3,2}"})J") == "json schema: /pattern: 'pattern' is not enforced: a repetition {n,m} with m < n");
    CHECK(refusal(R"J({"type":"string","pattern":"^([a-z]*)*$"})J") == "json schema: /pattern: 'pattern' is not enforced: an unbounded repetition of a group that can match the empty string (write (x*)* as x*)");
    CHECK(refusal(R"J({"type":"string","pattern":"[z-a]"})J") == "json schema: /pattern: 'pattern' is not enforced: a class range out of order");
    CHECK(refusal(R"J({"type":"string","pattern":"^a$","maxLength":3})J") == "json schema: /maxLength: a length or a format beside 'pattern' is not enforced");
    check_case({R"({"type":"number","minimum":0})", {"0", "0.5", "12e-3", "7", "-0", "-0.0e3"}, {"-1", "-0.5", "-1e9", "-0.01"}});
    CHECK(refusal(R"({"type":"array","uniqueItems":true})") == "json schema: /uniqueItems: 'uniqueItems' is not enforced");
    check_case({R"({"type":"array","uniqueItems":true,"maxItems":1})", {"[]", "[1]"}, {"[1,1]"}});
    // annotations and unknown keywords are ignored
    SchemaGrammar g(R"({"title":"t","description":"d","$schema":"x","$id":"y","examples":[1],"default":2,"$comment":"c","deprecated":false,"readOnly":true,"writeOnly":false,"x-vendor":{"pattern":1},"type":"integer"})", false);
    CHECK_MESSAGE(g.result == GPT2_OK, g.err.message);
}

TEST_CASE("json schema: bad schemas are refused with where and why") {
    REQUIRE(bpe_model().model);
    CHECK(refusal("{\"type\":\n  \"string\",}") == "json schema: malformed JSON at line 2, column 12: expected a key (a string in double quotes)");
    CHECK(refusal(R"({"type":"string")") == "json schema: malformed JSON at line 1, column 17: expected ',' or '}'");
    // columns count characters (é, € and 😀 take 2, 3 and 4 bytes: one column each)
    CHECK(refusal("{\"enum\":\n [\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\", x]}") ==
          "json schema: malformed JSON at line 2, column 10: expected a value (an object, array, string, number, true, false or null)");
    CHECK(refusal(R"([{"type":"string"}])") == "json schema: the schema must be an object or a boolean, not an array");
    CHECK(refusal(R"("string")") == "json schema: the schema must be an object or a boolean, not a string");
    CHECK(refusal(R"({"$ref":"#/$defs/missing"})") == "json schema: /$ref: unresolved $ref '#/$defs/missing'");
    CHECK(refusal(R"({"$ref":"http://example.com/s.json"})").find("unresolved $ref 'http://example.com/s.json'") != std::string::npos);
    CHECK(refusal(R"({"type":"integer","minimum":5,"maximum":4})") == "json schema: (root): contradictory bounds: no integer is at least 5 and at most 4, so no value matches the schema");
    CHECK(refusal(R"({"type":"string","minLength":5,"maxLength":4})") == "json schema: /maxLength: contradictory bounds: maxLength is less than minLength, so no value matches the schema");
    CHECK(refusal(R"({"type":"object","properties":{"a":true,"b":true},"additionalProperties":false,"minProperties":3})") ==
          "json schema: /minProperties: contradictory bounds: minProperties is more than the properties the object may have, so no value matches the schema");
    CHECK(refusal(R"({"type":"object","minProperties":3,"maxProperties":2})") == "json schema: /maxProperties: contradictory bounds: maxProperties is less than minProperties, so no value matches the schema");
    CHECK(refusal(R"({"type":"array","contains":{"const":1},"minContains":2,"maxContains":1})") == "json schema: no value matches the schema (false, or its constraints contradict each other)");
    for (const char* nothing : {R"({"not":{}})", R"({"not":true})", R"({"not":{"not":{"not":{}}}})", R"({"type":"array","contains":false})", R"({"oneOf":[true,true]})"})
        CHECK(refusal(nothing) == "json schema: no value matches the schema (false, or its constraints contradict each other)");
    CHECK(refusal(R"({"type":"strin"})").find("/type: expected a type name") != std::string::npos);
    CHECK(refusal(R"(false)") == "json schema: no value matches the schema (false, or its constraints contradict each other)");
    CHECK(refusal(R"({"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]})") ==
          "json schema: no finite value matches the schema (a $ref cycle with no way out: every value would nest without end)");
    // a $ref that is its own first step: only its other ways out are values
    CHECK(refusal(R"({"$ref":"#"})") == "json schema: no finite value matches the schema (a $ref cycle with no way out: every value would nest without end)");
    check_case({R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})", {"null"}, {"1", "[]"}});
    // an $id beside a $ref means another base to draft 7 than to draft 2019-09 and later: the
    // schema says which draft, or is refused
    CHECK(refusal(R"({"$defs":{"a":{"$id":"http://x/a.json","$defs":{"b":{"type":"integer"}},"$ref":"#/$defs/b"}},"$ref":"#/$defs/a"})") ==
          "json schema: /$defs/a/$id: where this $id points the $refs under it depends on the draft (draft 7 ignores an $id beside a $ref, draft 4 calls it \"id\"): name the draft with \"$schema\"");
    check_case({R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$defs":{"a":{"$id":"http://x/a.json","$defs":{"b":{"type":"integer"}},"$ref":"#/$defs/b"}},"$ref":"#/$defs/a"})",
                {"1"}, {R"("x")"}});
    // the applicators' pathological forms: an error naming the limit, not a hang or a stack overflow
    std::string deep_if, deep_not;
    for (int i = 0; i < 10000; i++) deep_if += R"({"if":)";
    deep_if += "true" + std::string(10000, '}');
    CHECK(refusal(deep_if).find("nested deeper than 256") != std::string::npos);
    for (int i = 0; i < 250; i++) deep_not += R"({"not":)";
    deep_not += R"({"type":"integer"})" + std::string(250, '}');
    {
        SchemaGrammar g(deep_not, true); // not 250 times: the integers, or refused as too deep
        CAPTURE(g.err.message);
        CHECK((g.result == GPT2_OK ? grammar_match(g.grammar, "7") == GPT2_MATCH_COMPLETE && grammar_match(g.grammar, "\"x\"") == GPT2_MATCH_NONE
                                   : std::string(g.err.message).find("deep") != std::string::npos));
    }
    std::string ranges = R"({"oneOf":[)";
    for (int i = 0; i < 12; i++) ranges += (i ? "," : "") + std::string(R"({"minimum":)") + std::to_string(2 * i) + R"(,"maximum":)" + std::to_string(2 * i + 1) + "}";
    ranges += "]}";
    CHECK(refusal(ranges).find("make more than 4096 branches in all") != std::string::npos);
    // 10,000-deep nesting: refused, not a stack overflow
    const std::string deep = std::string(10000, '[') + std::string(10000, ']');
    CHECK(refusal(deep).find("nested deeper than 256") != std::string::npos);
    std::string deep_schema;
    for (int i = 0; i < 10000; i++) deep_schema += R"({"items":)";
    deep_schema += "true" + std::string(10000, '}');
    CHECK(refusal(deep_schema).find("nested deeper than 256") != std::string::npos);
    // arguments
    gpt2_grammar* g = nullptr;
    gpt2_error err{};
    CHECK(gpt2_grammar_from_json_schema(bpe_model().model, nullptr, 3, nullptr, &g, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_grammar_from_json_schema(bpe_model().model, "{}", 2, nullptr, &g, &err) == GPT2_OK);
    gpt2_grammar_free(g);
}

TEST_CASE("json schema: whitespace runs are capped and compact allows none") {
    REQUIRE(bpe_model().model);
    const std::string schema = R"({"type":"object","properties":{"a":{"type":"integer"}}})";
    SchemaGrammar spaced(schema, false), compact(schema, true);
    REQUIRE(spaced.result == GPT2_OK);
    REQUIRE(compact.result == GPT2_OK);
    CHECK(grammar_match(spaced.grammar, "{\n  \"a\": 1\n}") == GPT2_MATCH_COMPLETE);
    CHECK(grammar_match(spaced.grammar, "{" + std::string(20, ' ') + "\"a\":1}") == GPT2_MATCH_COMPLETE);
    CHECK(grammar_match(spaced.grammar, "{" + std::string(21, ' ') + "\"a\":1}") == GPT2_MATCH_NONE);
    CHECK(grammar_match(compact.grammar, "{\"a\": 1}") == GPT2_MATCH_NONE);
    CHECK(grammar_match(compact.grammar, "{\"a\":1}") == GPT2_MATCH_COMPLETE);
}

// Patterns against JavaScript's RegExp: tests/data/regex_cases.txt (tools/make_regex_cases.js)
// holds strings as JSON.stringify writes them and whether the pattern matches each.
TEST_CASE("json schema: 'pattern' matches exactly the strings JavaScript's RegExp matches") {
    REQUIRE(bpe_model().model);
    std::string text;
    REQUIRE(read_whole_file(std::string(GPT2_TEST_DATA) + "/regex_cases.txt", &text));
    std::unique_ptr<SchemaGrammar> g;
    std::string schema;
    size_t patterns = 0, strings = 0;
    for (size_t at = 0, end; at < text.size(); at = end + 1) {
        end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        const std::string line = text.substr(at, end - at);
        if (line.rfind("pattern ", 0) == 0) {
            schema = "{\"type\":\"string\",\"pattern\":" + line.substr(8) + "}";
            g.reset(new SchemaGrammar(schema, true));
            CAPTURE(schema);
            REQUIRE_MESSAGE(g->result == GPT2_OK, g->err.message);
            patterns++;
        } else if (line.size() > 2) {
            REQUIRE(g);
            CAPTURE(schema);
            CAPTURE(line);
            CHECK((grammar_match(g->grammar, line.substr(2)) == GPT2_MATCH_COMPLETE) == (line[0] == '+'));
            strings++;
        }
    }
    CHECK(patterns >= 30);
    CHECK(strings >= 30 * 80);
}

// ---- MaskBench -------------------------------------------------------------------------------

namespace {

// The end of the JSON value that starts at s[i] (the reader under test is not used to read its
// own test data).
size_t value_end(const std::string& s, size_t i) {
    int depth = 0;
    bool in_string = false;
    for (; i < s.size(); i++) {
        const char c = s[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') {
                in_string = false;
                if (depth == 0) return i + 1;
            }
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0) return i; // the end of the object or array around a number or a word
            if (--depth == 0) return i + 1;
        } else if (depth == 0 && (c == ',' || c == '\n')) {
            return i;
        }
    }
    return i;
}

// The raw text of the members of the object at s[begin, end): key -> value text.
std::map<std::string, std::string> raw_members(const std::string& s, size_t begin, size_t end) {
    std::map<std::string, std::string> out;
    size_t i = begin + 1;
    while (i < end) {
        while (i < end && s[i] != '"' && s[i] != '}') i++;
        if (i >= end || s[i] == '}') break;
        const size_t key_end = value_end(s, i);
        const std::string key = s.substr(i + 1, key_end - i - 2);
        i = key_end;
        while (s[i] == ' ' || s[i] == ':') i++;
        const size_t v_end = value_end(s, i);
        out[key] = s.substr(i, v_end - i);
        i = v_end;
        while (i < end && (s[i] == ' ' || s[i] == ',')) i++;
    }
    return out;
}

std::vector<std::string> raw_items(const std::string& s) {
    std::vector<std::string> out;
    size_t i = 1;
    while (i < s.size()) {
        while (i < s.size() && (s[i] == ' ' || s[i] == ',' || s[i] == '\n')) i++;
        if (i >= s.size() || s[i] == ']') break;
        const size_t e = value_end(s, i);
        out.push_back(s.substr(i, e - i));
        i = e;
    }
    return out;
}

} // namespace

TEST_CASE("json schema: MaskBench sample, no invalid instance matches") {
    REQUIRE(bpe_model().model);
    std::string text;
    const std::string path = std::string(GPT2_SOURCE_DIR) + "/../shared/data/maskbench/sample1000.json";
    if (!read_whole_file(path, &text)) {
        MESSAGE("skipped: " << path << " is absent (MaskBench's sample lives outside the repository)");
        return;
    }
    std::vector<std::string> files = raw_items(text);
    REQUIRE(files.size() > 100);
    if (emulated()) files.resize(250); // the same C++ runs the whole sample natively and under Wine
    size_t compiled = 0, valid = 0, valid_ok = 0, invalid = 0, invalid_refused = 0, passing = 0;
    std::map<std::string, int> refused_by;
    for (const std::string& file : files) {
        const auto members = raw_members(file, 0, file.size());
        REQUIRE(members.count("schema"));
        REQUIRE(members.count("tests"));
        const std::string& schema = members.at("schema");
        SchemaGrammar g(schema, false);
        if (g.result != GPT2_OK) {
            std::string why = g.err.message;
            const size_t quote = why.find('\'');
            why = quote == std::string::npos ? why.substr(0, 40) : why.substr(quote, why.find('\'', quote + 1) - quote + 1);
            refused_by[why]++;
            continue;
        }
        compiled++;
        bool all_right = true;
        for (const std::string& t : raw_items(members.at("tests"))) {
            const auto test = raw_members(t, 0, t.size());
            const std::string& data = test.at("data");
            if (test.at("valid") == "true") {
                valid++;
                const bool ok = grammar_match(g.grammar, data) == GPT2_MATCH_COMPLETE;
                if (!ok && valid - valid_ok <= 5) MESSAGE("a valid instance refused (a validation error, allowed): " << data.substr(0, 300) << " of " << schema.substr(0, 300));
                valid_ok += ok;
                all_right &= ok;
            } else {
                invalid++;
                const bool accepted = grammar_match(g.grammar, data) == GPT2_MATCH_COMPLETE || grammar_match(g.grammar, compact_json(data)) == GPT2_MATCH_COMPLETE;
                CAPTURE(schema);
                CAPTURE(data);
                CHECK_FALSE(accepted); // an invalidation error
                invalid_refused += !accepted;
                all_right &= !accepted;
            }
        }
        passing += all_right;
    }
    std::vector<std::pair<int, std::string>> reasons;
    for (const auto& r : refused_by) reasons.emplace_back(r.second, r.first);
    std::sort(reasons.rbegin(), reasons.rend());
    std::string top;
    for (size_t i = 0; i < reasons.size() && i < 12; i++) top += " " + reasons[i].second + " " + std::to_string(reasons[i].first) + ";";
    MESSAGE("MaskBench sample: " << files.size() << " schemas, " << compiled << " compiled, " << passing << " with every instance right; valid instances accepted "
                                 << valid_ok << "/" << valid << ", invalid refused " << invalid_refused << "/" << invalid << "; refused for:" << top);
    CHECK(invalid_refused == invalid);
}
