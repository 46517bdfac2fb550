// JSON Schema by the standard's own tests: every group of the JSON-Schema-Test-Suite's draft2020-12
// and draft7 files (tests/data/json_schema_suite, MIT) through gpt2_grammar_from_json_schema, as a
// generator must be checked. Each group's schema is made into a grammar or refused with a message;
// each instance, written as compact JSON, must match where the suite says valid and must not where
// it says invalid. An invalid instance accepted fails the test (the one number that must stay 0),
// and so do fewer groups made than the floor below. A valid instance refused is reported: the
// grammar may accept less than the schema. The optional files (optional/, formats) are reported.
// docs/GRAMMARS.md's coverage table is this report; the test fails where the two differ, and with
// GPT2_WRITE_DOCS=1 it writes the table there.
#include "helpers.h"
#include "grammar_helpers.h"
#include "test_files.h"
#include <doctest/doctest.h>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

// The required files' groups made with the standard's options; the test fails below it (raise it
// as the converter enforces more).
constexpr size_t kGroupsMadeFloor = 514;

const char* const kDrafts[] = {"draft2020-12", "draft7"};

// The suite's files (its index: the files of each folder, as the suite names them).
const char* const kRequired[] = {
    "additionalItems", "additionalProperties", "allOf", "anchor", "anyOf", "boolean_schema", "const", "contains", "content",
    "default", "definitions", "defs", "dependencies", "dependentRequired", "dependentSchemas", "dynamicRef", "enum",
    "exclusiveMaximum", "exclusiveMinimum", "format", "if-then-else", "infinite-loop-detection", "items", "maxContains",
    "maxItems", "maxLength", "maxProperties", "maximum", "minContains", "minItems", "minLength", "minProperties", "minimum",
    "multipleOf", "not", "oneOf", "pattern", "patternProperties", "prefixItems", "properties", "propertyNames", "ref",
    "refRemote", "required", "type", "unevaluatedItems", "unevaluatedProperties", "uniqueItems", "vocabulary"};
const char* const kOptional[] = {
    "optional/anchor", "optional/bignum", "optional/content", "optional/cross-draft", "optional/dependencies-compatibility",
    "optional/dynamicRef", "optional/ecmascript-regex", "optional/float-overflow", "optional/format-assertion", "optional/id",
    "optional/no-schema", "optional/non-bmp-regex", "optional/refOfUnknownKeyword", "optional/unknownKeyword",
    "optional/format/date", "optional/format/date-time", "optional/format/duration", "optional/format/ecmascript-regex",
    "optional/format/email", "optional/format/hostname", "optional/format/idn-email", "optional/format/idn-hostname",
    "optional/format/ipv4", "optional/format/ipv6", "optional/format/iri", "optional/format/iri-reference",
    "optional/format/json-pointer", "optional/format/regex", "optional/format/relative-json-pointer", "optional/format/time",
    "optional/format/unknown", "optional/format/uri", "optional/format/uri-reference", "optional/format/uri-template",
    "optional/format/uuid"};

struct Tally {
    size_t groups = 0, made = 0, valid_accepted = 0, valid_refused = 0, invalid_refused = 0, invalid_accepted = 0;
    std::map<std::string, size_t> refused_by; // groups refused, by the keyword the refusal names
    void add(const Tally& t) {
        groups += t.groups, made += t.made, valid_accepted += t.valid_accepted, valid_refused += t.valid_refused;
        invalid_refused += t.invalid_refused, invalid_accepted += t.invalid_accepted;
        for (const auto& r : t.refused_by) refused_by[r.first] += r.second;
    }
};

void write_string(const std::string& text, std::string* out) {
    *out += '"';
    for (unsigned char c : text) {
        char buf[8];
        switch (c) {
        case '"': *out += "\\\""; break;
        case '\\': *out += "\\\\"; break;
        case '\n': *out += "\\n"; break;
        case '\t': *out += "\\t"; break;
        case '\r': *out += "\\r"; break;
        case '\b': *out += "\\b"; break;
        case '\f': *out += "\\f"; break;
        default:
            if (c < 0x20) std::snprintf(buf, sizeof buf, "\\u%04x", c), *out += buf;
            else *out += (char)c;
        }
    }
    *out += '"';
}

// A value as compact JSON: no whitespace, keys in the order written, strings with the fewest
// escapes (json.dumps(ensure_ascii=False, separators=(",", ":"))), numbers as the suite writes them.
void write_compact(const std::string& doc, const Json& v, std::string* out) {
    switch (v.kind) {
    case Json::String: write_string(v.string, out); break;
    case Json::Array:
        *out += '[';
        for (size_t i = 0; i < v.array.size(); i++) {
            if (i) *out += ',';
            write_compact(doc, v.array[i], out);
        }
        *out += ']';
        break;
    case Json::Object:
        *out += '{';
        for (size_t i = 0; i < v.keys.size(); i++) {
            if (i) *out += ',';
            write_string(v.keys[i], out);
            *out += ':';
            write_compact(doc, v[v.keys[i]], out);
        }
        *out += '}';
        break;
    default: out->append(doc, v.begin, v.end - v.begin); /* null, true, false, a number as written */
    }
}

// The keyword a refusal names: "json schema: /not: 'not' is enforced only ..." -> "not"; where no
// keyword is quoted, the last part of the pointer; a $ref to another document -> "$ref (remote)";
// a schema no value matches (false, not: {}) -> "(no value)".
std::string refused_keyword(const std::string& message) {
    if (message.find("unresolved $ref") != std::string::npos && message.find("another document") != std::string::npos) return "$ref (remote)";
    if (message.find("no value matches") != std::string::npos || message.find("no finite value matches") != std::string::npos) return "(no value)";
    const size_t open = message.find('\'');
    if (open != std::string::npos) {
        const size_t close = message.find('\'', open + 1);
        const std::string word = message.substr(open + 1, close - open - 1);
        if (!word.empty() && word.find_first_not_of("$abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") == std::string::npos) return word;
    }
    const size_t at = message.find(": /");
    if (at != std::string::npos) {
        const size_t end = message.find(':', at + 2);
        const std::string pointer = message.substr(at + 2, end - at - 2);
        return pointer.substr(pointer.rfind('/') + 1);
    }
    return message.substr(0, std::min<size_t>(message.size(), 40));
}

// One file of the suite through the converter with `params`.
Tally run_file(const std::string& path, const gpt2_json_schema_params& params, std::vector<std::string>* accepted_invalid) {
    std::string doc;
    Tally t;
    if (!read_whole_file(path, &doc)) return t;
    const Json groups = JsonParser(doc).parse();
    for (const Json& group : groups.array) {
        t.groups++;
        const Json& schema = group["schema"];
        gpt2_grammar* grammar = nullptr;
        gpt2_error err{};
        const gpt2_result result = gpt2_grammar_from_json_schema(bpe_model().model, doc.data() + schema.begin, schema.end - schema.begin, &params, &grammar, &err);
        if (result != GPT2_OK) {
            CHECK_MESSAGE(result == GPT2_ERROR_BAD_GRAMMAR, err.message); // a refusal, never another failure
            CHECK(std::string(err.message).rfind("json schema: ", 0) == 0);
            t.refused_by[refused_keyword(err.message)]++;
            continue;
        }
        t.made++;
        for (const Json& test : group["tests"].array) {
            std::string instance;
            write_compact(doc, test["data"], &instance);
            const bool accepted = grammar_match(grammar, instance) == GPT2_MATCH_COMPLETE;
            if (test["valid"].boolean) (accepted ? t.valid_accepted : t.valid_refused)++;
            else (accepted ? t.invalid_accepted : t.invalid_refused)++;
            if (accepted && !test["valid"].boolean)
                accepted_invalid->push_back(path + ": " + group["description"].string + ": " + test["description"].string + ": " + instance);
        }
        gpt2_grammar_free(grammar);
    }
    return t;
}

std::string suite_path(const char* draft, const std::string& file) { return test_data(std::string("json_schema_suite/") + draft + "/" + file + ".json"); }

std::string fraction(size_t part, size_t whole) { return whole ? std::to_string(part) + "/" + std::to_string(whole) : "-"; }

std::string percent(size_t part, size_t whole) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.1f%%", whole ? 100.0 * (double)part / (double)whole : 0.0);
    return buf;
}

// "`oneOf` 3, `not` 2": the refusals by keyword, the most first.
std::string refusals_text(const std::map<std::string, size_t>& by) {
    std::vector<std::pair<size_t, std::string>> sorted;
    for (const auto& r : by) sorted.emplace_back(r.second, r.first);
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::string text;
    for (const auto& r : sorted) text += (text.empty() ? "" : ", ") + ("`" + r.second + "` ") + std::to_string(r.first);
    return text;
}

const char kTableBegin[] = "<!-- json-schema-suite table: written by tests/test_json_schema_suite.cpp (GPT2_WRITE_DOCS=1) -->\n";
const char kTableEnd[] = "<!-- json-schema-suite table end -->\n";

} // namespace

TEST_CASE("json schema: the JSON-Schema-Test-Suite's draft2020-12 and draft7, no invalid instance accepted") {
    REQUIRE(bpe_model().model);
    // the standard's options: any key order, integers written with a fraction of zeros
    gpt2_json_schema_params standard = gpt2_json_schema_default_params();
    standard.compact = 1;
    standard.any_order = 1;
    standard.integer_fraction = 1;
    gpt2_json_schema_params defaults = gpt2_json_schema_default_params();
    defaults.compact = 1;

    std::vector<std::string> accepted_invalid;
    std::string rows;
    Tally required[2], optional[2], with_defaults;
    for (const char* file : kRequired) {
        Tally per_draft[2];
        for (int d = 0; d < 2; d++) {
            per_draft[d] = run_file(suite_path(kDrafts[d], file), standard, &accepted_invalid);
            required[d].add(per_draft[d]);
            with_defaults.add(run_file(suite_path(kDrafts[d], file), defaults, &accepted_invalid));
        }
        Tally both = per_draft[0];
        both.add(per_draft[1]);
        if (!both.groups) continue;
        MESSAGE(std::string(file) << ": groups made " << both.made << ", refused " << both.groups - both.made << " (" << refusals_text(both.refused_by) << "); valid accepted "
                     << both.valid_accepted << ", valid refused " << both.valid_refused << ", invalid refused " << both.invalid_refused << ", invalid accepted "
                     << both.invalid_accepted);
        rows += "| `" + std::string(file) + "` | " + fraction(per_draft[0].made, per_draft[0].groups) + " | " + fraction(per_draft[1].made, per_draft[1].groups) + " | " +
                fraction(both.valid_accepted, both.valid_accepted + both.valid_refused) + " | " + refusals_text(both.refused_by) + " |\n";
    }
    for (const char* file : kOptional)
        for (int d = 0; d < 2; d++) optional[d].add(run_file(suite_path(kDrafts[d], file), standard, &accepted_invalid));
    Tally all = required[0], all_optional = optional[0];
    all.add(required[1]);
    all_optional.add(optional[1]);

    const std::string table = std::string(kTableBegin) + "| File | draft 2020-12 groups made | draft 7 groups made | valid instances accepted | groups refused for |\n" +
                              "|---|---|---|---|---|\n" + rows + "| **all** | " + fraction(required[0].made, required[0].groups) + " | " +
                              fraction(required[1].made, required[1].groups) + " | " + fraction(all.valid_accepted, all.valid_accepted + all.valid_refused) + " | " +
                              percent(all.made, all.groups) + " of the groups made; invalid instances refused " + fraction(all.invalid_refused, all.invalid_refused + all.invalid_accepted) +
                              " |\n\nThe optional files (`optional/`, formats): " + fraction(all_optional.made, all_optional.groups) + " groups made, valid instances accepted " +
                              fraction(all_optional.valid_accepted, all_optional.valid_accepted + all_optional.valid_refused) + ", invalid refused " +
                              fraction(all_optional.invalid_refused, all_optional.invalid_refused + all_optional.invalid_accepted) + ".\n" + kTableEnd;
    MESSAGE("JSON-Schema-Test-Suite, required files: " << all.made << " of " << all.groups << " groups made (" << percent(all.made, all.groups) << "), valid accepted "
                                                       << all.valid_accepted << ", valid refused " << all.valid_refused << ", invalid refused " << all.invalid_refused
                                                       << ", invalid accepted " << all.invalid_accepted << "; with the default options " << with_defaults.made
                                                       << " groups made, invalid accepted " << with_defaults.invalid_accepted << "; optional files: " << all_optional.made
                                                       << " of " << all_optional.groups << " groups made, invalid accepted " << all_optional.invalid_accepted);
    for (const std::string& a : accepted_invalid) MESSAGE("an invalid instance accepted: " << a); // in the optional files: reported, not required
    CHECK(all.groups == 640);
    CHECK(all.invalid_accepted == 0);
    CHECK(with_defaults.invalid_accepted == 0);
    CHECK(all.made >= kGroupsMadeFloor);

    // docs/GRAMMARS.md holds the table as this report writes it
    const std::string doc_path = std::string(GPT2_SOURCE_DIR) + "/docs/GRAMMARS.md";
    std::string doc;
    REQUIRE(read_whole_file(doc_path, &doc));
    const size_t begin = doc.find(kTableBegin), end = doc.find(kTableEnd);
    REQUIRE_MESSAGE((begin != std::string::npos && end != std::string::npos && begin < end), "docs/GRAMMARS.md has no json-schema-suite table markers");
    const std::string in_doc = doc.substr(begin, end + sizeof kTableEnd - 1 - begin);
    const char* write = std::getenv("GPT2_WRITE_DOCS");
    if (write && std::string(write) == "1" && in_doc != table) {
        std::ofstream(doc_path, std::ios::binary) << doc.substr(0, begin) + table + doc.substr(end + sizeof kTableEnd - 1);
        MESSAGE("wrote the table into " << doc_path);
    } else {
        CHECK_MESSAGE(in_doc == table, "docs/GRAMMARS.md's JSON-Schema-Test-Suite table differs from the suite's report; run this test with GPT2_WRITE_DOCS=1 to write it");
    }
}
