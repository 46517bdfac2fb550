// Grammars: GBNF read or refused with a message that says where, text matched against an
// independent reference (std::regex over every short string), and generation that follows the
// grammar with the character vocabulary and with GPT-2's BPE.
#include "helpers.h"
#include "grammar_helpers.h"
#include "test_files.h"
#include <doctest/doctest.h>
#include <regex>
#include <set>

namespace {

struct Grammar {
    gpt2_grammar* grammar = nullptr;
    gpt2_error err{};
    gpt2_result result = GPT2_OK;
    Grammar(const gpt2_model* model, const char* gbnf, const char* root = nullptr) {
        result = gpt2_grammar_from_gbnf(model, gbnf, root, &grammar, &err);
    }
    ~Grammar() { gpt2_grammar_free(grammar); }
    Grammar(const Grammar&) = delete;
    Grammar& operator=(const Grammar&) = delete;
};

const char* match_name(gpt2_match m) { return m == GPT2_MATCH_COMPLETE ? "COMPLETE" : m == GPT2_MATCH_PREFIX ? "PREFIX" : "NONE"; }

// Every string over `alphabet` of length <= n.
std::vector<std::string> strings_up_to(const std::string& alphabet, size_t n) {
    std::vector<std::string> all{""};
    for (size_t begin = 0, len = 0; len < n; len++) {
        const size_t end = all.size();
        for (size_t i = begin; i < end; i++)
            for (char c : alphabet) all.push_back(all[i] + c);
        begin = end;
    }
    return all;
}


struct Generated {
    gpt2_result result = GPT2_OK;
    gpt2_error err{};
    std::string text;
    std::vector<int32_t> tokens;
    gpt2_match match = GPT2_MATCH_NONE;
};

int collect_text(void* user, int32_t, const char* text, size_t len) {
    static_cast<std::string*>(user)->append(text ? text : "", len);
    return 0;
}

Generated generate_with(const gpt2_model* model, gpt2_session* s, const char* prompt, gpt2_generate_params p) {
    Generated out;
    p.on_token = collect_text;
    p.user = &out.text;
    p.grammar_match = &out.match;
    std::vector<int32_t> ids(4096);
    size_t n_prompt = 0;
    std::vector<int32_t> prompt_ids(256);
    REQUIRE(gpt2_tokenize(model, prompt, std::strlen(prompt), 0, prompt_ids.data(), prompt_ids.size(), &n_prompt, &out.err) == GPT2_OK);
    size_t n = 0;
    out.result = gpt2_generate(s, prompt_ids.data(), n_prompt, &p, ids.data(), ids.size(), &n, &out.err);
    out.tokens.assign(ids.begin(), ids.begin() + (long)std::min(n, ids.size()));
    return out;
}

// "ROMEO:" and up to max_new_tokens tokens drawn under the grammar at temperature 1.
Generated generate_sampled(const Model& m, Session& s, const gpt2_grammar* grammar, uint64_t seed, int max_new_tokens) {
    gpt2_generate_params p = gpt2_generate_default_params();
    p.grammar = grammar;
    p.seed = seed;
    p.temperature = 1.0f;
    p.max_new_tokens = max_new_tokens;
    return generate_with(m.model, s.session, "ROMEO:", p);
}

} // namespace

TEST_CASE("grammar: malformed GBNF is refused with the line, the column and what is wrong") {
    const Model& m = char_model();
    REQUIRE(m.model);
    struct Case {
        const char* gbnf;
        const char* message;
    } cases[] = {
        {"root ::= \"abc", "line 1, column 10: this literal has no closing '\"'"},
        {"root ::= []", "column 10: empty character class"},
        {"root ::= [z-a]", "runs backwards"},
        {"root ::= [abc", "no closing ']'"},
        {"root ::= \"\\q\"", "column 11: invalid escape \\q"},
        {"root ::= \"\\x4\"", "expected 2 hexadecimal digits after \\x"},
        {"root ::= \"\\uD800\"", "U+D800 is not a character"},
        {"root ::= \"\xff\"", "byte 0xFF is not UTF-8 text"},
        {"root ::= foo", "line 1, column 10: rule 'foo' is used but never defined"},
        {"foo ::= \"a\"", "no rule named 'root'"},
        {"root ::= \"a\"\n\nroot ::= \"b\"", "line 3, column 1: rule 'root' is defined twice (first at line 1)"},
        {"root = \"a\"", "column 6: expected '::=' after the rule name 'root', found '='"},
        {"root ::= ( \"a\"", "column 10: this group has no closing ')'"},
        {"root ::= \"a\" )", "column 14: unexpected ')'"},
        {"root ::= \"a\"{3,1}", "{3,1}: the most is below the least"},
        {"root ::= \"a\"{x}", "expected a number in {m,n}, found 'x'"},
        {"root ::= \"a\"{99999999}", "a repetition count above"},
        {"root ::= \"a\" @", "column 14: expected a rule name, a \"literal\", a [class], '.' or '(', found '@'"},
        {"", "no rules"},
        {"  # only a comment\n", "no rules"},
        {"root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive (root -> root)"},
        {"root ::= x \"a\"\nx ::= y? root\ny ::= \"b\"", "left-recursive (root -> x -> root)"},
        {"root ::= x | \"a\"\nx ::= \"b\"* root \"c\"", "rule 'x' is left-recursive (x -> root -> x)"},
        {"root ::= [^\\x00-\\U0010FFFF]", "this character class matches no character"},
    };
    for (const Case& c : cases) {
        const std::string gbnf = c.gbnf;
        CAPTURE(gbnf);
        Grammar g(m.model, c.gbnf);
        CHECK(g.grammar == nullptr);
        CHECK_ERROR(g.err, GPT2_ERROR_BAD_GRAMMAR, c.message);
    }
    Grammar named(m.model, "start ::= \"a\"", "start");
    CHECK(named.result == GPT2_OK);
    Grammar missing(m.model, "start ::= \"a\"", "begin");
    CHECK_ERROR(missing.err, GPT2_ERROR_BAD_GRAMMAR, "no rule named 'begin'");
}

TEST_CASE("grammar: bad arguments and a model without vocabulary are refused") {
    const Model& m = char_model();
    gpt2_grammar* g = nullptr;
    gpt2_error err;
    CHECK(gpt2_grammar_from_gbnf(nullptr, "root ::= \"a\"", nullptr, &g, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_grammar_from_gbnf(m.model, nullptr, nullptr, &g, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_grammar_from_gbnf(m.model, "root ::= \"a\"", nullptr, nullptr, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    gpt2_match result;
    CHECK(gpt2_grammar_match(nullptr, "a", 1, &result, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    Grammar ok(m.model, "root ::= \"a\"");
    CHECK(gpt2_grammar_match(ok.grammar, nullptr, 1, &result, &err) == GPT2_ERROR_INVALID_ARGUMENT);
    CHECK(gpt2_grammar_match(ok.grammar, nullptr, 0, &result, &err) == GPT2_OK);
    CHECK(result == GPT2_MATCH_PREFIX);
    gpt2_grammar_free(nullptr);
}

TEST_CASE("grammar: every GBNF feature accepts what an equivalent regex accepts, and nothing else") {
    // The reference: a string is COMPLETE when std::regex matches it whole, PREFIX when some
    // string of up to `longest` characters over the alphabet that begins with it matches.
    const Model& m = char_model();
    struct Case {
        const char* gbnf;
        const char* regex;
        size_t text_max = 4; // texts this long at most, so that a completion fits in `longest`
    } cases[] = {
        {"root ::= \"ab\" | \"a-\"", "ab|a-"},
        {"root ::= [ab]+ \"-\"", "[ab]+-"},
        {"root ::= \"a\"* \"b\"?", "a*b?"},
        {"root ::= (\"ab\")+", "(ab)+"},
        {"root ::= \"a\"{2}", "a{2}"},
        {"root ::= \"a\"{2,}", "a{2,}"},
        {"root ::= \"a\"{1,3} \"b\"", "a{1,3}b"},
        {"root ::= \"ab\"{0,2}", "(ab){0,2}"},
        {"root ::= [^a]+", "[^a]+"},
        {"root ::= . \"a\"", ".a"},
        {"root ::= x \"-\" x\nx ::= \"a\" | \"b\" x", "b*a-b*a"},
        {"root ::= [a\\-]+ \"b\"", "[a\\-]+b"},
        {"root ::= [a-b]{2,3}", "[a-b]{2,3}"},
        {"root ::= \"a\" # a comment | \"b\"\n  | \"b\" \"-\"", "a|b-"},
        {"root ::= (\"a\" | \"ab\") (\"b\" | \"-\")*", "(a|ab)(b|-)*"},
        {"root ::= \"a\" root \"b\" | \"-\"", "-|a-b|aa-bb|aaa-bbb", 3},
        {"root ::= (x | y)*\nx ::= \"a\" \"b\"?\ny ::= \"-\"+", "(ab?|-+)*"},
        {"root ::=\n  \"a\"\n  (\"b\"\n   | \"-\")\nother ::= \"x\"", "a(b|-)"},
        {"root ::= \"\\x61\" \"\\u0062\" \"\\U0000002d\"", "ab-"},
        // a repetition of something that can read nothing: the empty iteration is a tail call
        // back to the same stack, as llama.cpp reads it
        {"root ::= ( [a]* )*", "a*"},
        {"root ::= ( \"a\"? \"b\"? )* \"-\"", "[ab]*-"},
        {"root ::= ( \"a\"* | \"b\" )+ \"-\"?", "[ab]*-?"},
        {"root ::= x \"-\"\nx ::= y x | \"\"\ny ::= \"a\"*", "a*-"},
    };
    const std::string alphabet = "ab-";
    const size_t longest = 8;
    const std::vector<std::string> candidates = strings_up_to(alphabet, longest);
    for (const Case& c : cases) {
        const std::string gbnf = c.gbnf;
        CAPTURE(gbnf);
        Grammar g(m.model, c.gbnf);
        REQUIRE_MESSAGE(g.result == GPT2_OK, g.err.message);
        const std::regex re(c.regex);
        std::vector<std::string> sentences;
        for (const std::string& s : candidates)
            if (std::regex_match(s, re)) sentences.push_back(s);
        for (const std::string& text : strings_up_to(alphabet, c.text_max)) {
            gpt2_match expected = GPT2_MATCH_NONE;
            for (const std::string& s : sentences)
                if (s.compare(0, text.size(), text) == 0) expected = s.size() == text.size() ? GPT2_MATCH_COMPLETE : std::max(expected, GPT2_MATCH_PREFIX);
            CAPTURE(text);
            CHECK(match_name(grammar_match(g.grammar, text)) == std::string(match_name(expected)));
        }
    }
}

TEST_CASE("grammar: classes read code points, and text is checked as UTF-8 bytes") {
    const Model& m = bpe_model(); // its vocabulary writes every character (shakespeare_char's has no é)
    Grammar range(m.model, "root ::= [é-ë]");
    REQUIRE(range.result == GPT2_OK);
    CHECK(grammar_match(range.grammar, "é") == GPT2_MATCH_COMPLETE);
    CHECK(grammar_match(range.grammar, "ë") == GPT2_MATCH_COMPLETE);
    CHECK(grammar_match(range.grammar, "\xC3") == GPT2_MATCH_PREFIX);      // the first byte of é
    CHECK(grammar_match(range.grammar, "à") == GPT2_MATCH_NONE);           // U+00E0, below the range
    CHECK(grammar_match(range.grammar, "\xE2") == GPT2_MATCH_NONE);        // starts only characters above U+0800
    CHECK(grammar_match(range.grammar, "e") == GPT2_MATCH_NONE);
    Grammar ascii(m.model, "root ::= [\\x00-\\x7F]");
    for (const char* lead : {"\xC2", "\xDF", "\xE0", "\xEF", "\xF0", "\xF4"}) CHECK(grammar_match(ascii.grammar, lead) == GPT2_MATCH_NONE); // no ASCII starts so
    Grammar negated(m.model, "root ::= [^a]");
    CHECK(grammar_match(negated.grammar, "€") == GPT2_MATCH_COMPLETE);
    CHECK(grammar_match(negated.grammar, "\xE2\x82") == GPT2_MATCH_PREFIX);
    CHECK(grammar_match(negated.grammar, "\xFF") == GPT2_MATCH_NONE);      // never UTF-8
    CHECK(grammar_match(negated.grammar, "\xE0\x80") == GPT2_MATCH_NONE);  // an overlong form
    CHECK(grammar_match(negated.grammar, "\xED\xA0\x80") == GPT2_MATCH_NONE); // a surrogate
    CHECK(grammar_match(negated.grammar, "\xC3\xA9") == GPT2_MATCH_COMPLETE);
    Grammar any(m.model, "root ::= . .");
    CHECK(grammar_match(any.grammar, "😀x") == GPT2_MATCH_COMPLETE);
    CHECK(grammar_match(any.grammar, "\xF0\x9F\x98") == GPT2_MATCH_PREFIX);
    Grammar escaped(m.model, "root ::= \"\\u00e9\\n\\t\\\"\\\\\"");
    CHECK(grammar_match(escaped.grammar, "é\n\t\"\\") == GPT2_MATCH_COMPLETE);
}

TEST_CASE("grammar: an ambiguous grammar stops at a limit with an error instead of growing without bound") {
    const Model& m = char_model();
    Grammar g(m.model, "root ::= x{6000}\nx ::= \"a\"*");
    REQUIRE(g.result == GPT2_OK);
    gpt2_match result;
    gpt2_error err;
    CHECK(gpt2_grammar_match(g.grammar, "aa", 2, &result, &err) == GPT2_ERROR_BAD_GRAMMAR);
    CHECK(has(err, "too ambiguous"));
    // 2^13 ways to read the empty text (each rule of the chain two ways), and 2^23: the limit
    // holds before any text, and is met early, not after following millions of stacks
    for (int levels : {14, 24}) {
        std::string chain = "root ::= a1?\n";
        for (int i = 1; i < levels; i++)
            chain += "a" + std::to_string(i) + " ::= a" + std::to_string(i + 1) + " \"x\" | a" + std::to_string(i + 1) + " \"y\"\n";
        chain += "a" + std::to_string(levels) + " ::= \"z\"\n";
        Grammar deep(m.model, chain.c_str());
        REQUIRE(deep.result == GPT2_OK);
        CHECK(gpt2_grammar_match(deep.grammar, "", 0, &result, &err) == GPT2_ERROR_BAD_GRAMMAR);
        CHECK(has(err, "too ambiguous"));
        Session s(m);
        gpt2_generate_params p = gpt2_generate_default_params();
        p.grammar = deep.grammar;
        CHECK(gpt2_generate_text(s.session, "ROMEO:", &p, &err) == GPT2_ERROR_BAD_GRAMMAR);
        CHECK(has(err, "too ambiguous"));
    }
}

TEST_CASE("grammar: a repetition of something that can read nothing masks and generates without spinning on the empty iteration") {
    const Model& m = char_model();
    Grammar g(m.model, "root ::= ( [a-z]* \" \"? )* ( \"\" | [A-Z]* )* \".\"");
    REQUIRE_MESSAGE(g.result == GPT2_OK, g.err.message);
    CHECK(grammar_match(g.grammar, "") == GPT2_MATCH_PREFIX);
    CHECK(grammar_match(g.grammar, ".") == GPT2_MATCH_COMPLETE);
    CHECK(grammar_match(g.grammar, "ab  cd EF.") == GPT2_MATCH_COMPLETE);
    CHECK(grammar_match(g.grammar, "Ab.") == GPT2_MATCH_NONE); // capitals end the words
    CHECK(grammar_match(g.grammar, "ab.c") == GPT2_MATCH_NONE);
    for (uint64_t seed = 1; seed <= 4; seed++) {
        Session s(m);
        const Generated out = generate_sampled(m, s, g.grammar, seed, 40);
        CAPTURE(out.text);
        REQUIRE_MESSAGE(out.result == GPT2_OK, out.err.message);
        CHECK(grammar_match(g.grammar, out.text) == out.match);
        CHECK(out.match != GPT2_MATCH_NONE);
    }
}

TEST_CASE("grammar: generation follows the grammar, ends when the sentence is whole, and says so") {
    const Model& m = char_model();
    Grammar g(m.model, "root ::= \"ACTION: \" action \"\\n\" line\naction ::= \"wave\" | \"attack\" | \"flee\"\nline ::= [A-Za-z ,']{1,30} \".\"");
    REQUIRE(g.result == GPT2_OK);
    std::set<std::string> actions;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        Session s(m);
        const Generated out = generate_sampled(m, s, g.grammar, seed, 200);
        CAPTURE(out.text);
        REQUIRE_MESSAGE(out.result == GPT2_OK, out.err.message);
        CHECK(grammar_match(g.grammar, out.text) == GPT2_MATCH_COMPLETE);
        CHECK(out.match == GPT2_MATCH_COMPLETE);
        actions.insert(out.text.substr(8, out.text.find('\n') - 8));
    }
    CHECK(actions.size() >= 2); // the grammar leaves the choice to the model
}

TEST_CASE("grammar: at max_new_tokens the text is a prefix of a sentence, and the result says so") {
    const Model& m = char_model();
    Grammar g(m.model, "root ::= [a-z ]+ \".\"");
    Session s(m);
    gpt2_generate_params p = gpt2_generate_default_params();
    p.grammar = g.grammar;
    p.max_new_tokens = 5;
    p.logit_bias = nullptr;
    const Generated out = generate_with(m.model, s.session, "ROMEO:", p);
    REQUIRE_MESSAGE(out.result == GPT2_OK, out.err.message);
    CHECK(out.tokens.size() == 5);
    const gpt2_match expected = grammar_match(g.grammar, out.text);
    CHECK(expected != GPT2_MATCH_NONE);
    CHECK(out.match == expected);
}

TEST_CASE("grammar: a grammar that allows every text draws the same tokens as no grammar") {
    const Model& m = char_model();
    Grammar all(m.model, "root ::= .*");
    for (float temperature : {0.0f, 0.8f}) {
        Session a(m), b(m);
        gpt2_generate_params p = gpt2_generate_default_params();
        p.temperature = temperature;
        p.max_new_tokens = 40;
        const Generated free_text = generate_with(m.model, a.session, "ROMEO:", p);
        p.grammar = all.grammar;
        const Generated constrained = generate_with(m.model, b.session, "ROMEO:", p);
        CHECK(free_text.tokens == constrained.tokens);
        CHECK(constrained.match == GPT2_MATCH_COMPLETE);
    }
}

namespace {
struct MaskCheck {
    const gpt2_grammar* grammar;
    const gpt2_model* model;
    std::string text; // generated so far
    int steps = 0, mismatches = 0, allowed = 0;
};

// on_logits sees the logits after the grammar's mask: a token is finite exactly when the text
// with its bytes is still a sentence or the beginning of one (the end token: a whole sentence).
void check_mask(void* user, float* logits, int n) {
    MaskCheck* c = static_cast<MaskCheck*>(user);
    const gpt2_model_info info = gpt2_model_get_info(c->model);
    c->steps++;
    for (int t = 0; t < n; t++) {
        bool expected;
        if (t == info.eos_token) {
            expected = grammar_match(c->grammar, c->text) == GPT2_MATCH_COMPLETE;
        } else {
            const std::string piece = token_text(c->model, t);
            expected = !piece.empty() && grammar_match(c->grammar, c->text + piece) != GPT2_MATCH_NONE;
        }
        const bool finite = logits[t] > -INFINITY;
        c->allowed += finite;
        if (finite != expected && c->mismatches++ < 5) FAIL_CHECK("token " << t << " is " << std::string(finite ? "allowed" : "masked") << " after \"" << c->text << "\"");
    }
}

int append_token_text(void* user, int32_t token, const char*, size_t);

// Generates from `prompt` with the grammar, checking every step's mask (check_mask).
MaskCheck generate_checking_masks(const Model& m, const gpt2_grammar* grammar, const char* prompt, uint64_t seed, float temperature, int n) {
    Session s(m);
    MaskCheck check{grammar, m.model, "", 0, 0, 0};
    gpt2_generate_params p = gpt2_generate_default_params();
    p.grammar = grammar;
    p.on_logits = check_mask;
    p.on_token = append_token_text;
    p.user = &check;
    p.seed = seed;
    p.temperature = temperature;
    p.max_new_tokens = n;
    gpt2_error err;
    REQUIRE_MESSAGE(gpt2_generate_text(s.session, prompt, &p, &err) == GPT2_OK, err.message);
    return check;
}

int append_token_text(void* user, int32_t token, const char*, size_t) {
    MaskCheck* c = static_cast<MaskCheck*>(user);
    if (token >= 0) c->text += token_text(c->model, token);
    return 0;
}
} // namespace

TEST_CASE("grammar: the mask allows exactly the tokens that keep the text in the grammar (GPT-2 BPE)") {
    const Model& m = bpe_model();
    REQUIRE(m.model);
    const char* json_like =
        "root ::= \"{\" ws \"\\\"name\\\":\" ws string ws \",\" ws \"\\\"age\\\":\" ws [0-9]{1,3} ws \"}\"\n"
        "string ::= \"\\\"\" [^\"\\\\\\n]{0,12} \"\\\"\"\n"
        "ws ::= [ ]?";
    Grammar g(m.model, json_like);
    REQUIRE_MESSAGE(g.result == GPT2_OK, g.err.message);
    const MaskCheck check = generate_checking_masks(m, g.grammar, "Hello", gpt2_generate_default_params().seed, gpt2_generate_default_params().temperature, 6);
    CHECK(check.steps >= 1);
    CHECK(check.mismatches == 0);
    CHECK(check.allowed > check.steps); // more than one choice at some step
    CHECK(grammar_match(g.grammar, check.text) != GPT2_MATCH_NONE);
}

TEST_CASE("grammar: the mask allows exactly the tokens that keep the text JSON (examples/grammars/json.gbnf, GPT-2 BPE)") {
    const Model& m = bpe_model();
    REQUIRE(m.model);
    std::string gbnf;
    REQUIRE(read_whole_file(std::string(GPT2_SOURCE_DIR) + "/examples/grammars/json.gbnf", &gbnf));
    Grammar g(m.model, gbnf.c_str());
    REQUIRE_MESSAGE(g.result == GPT2_OK, g.err.message);
    for (uint64_t seed : {1, 2}) {
        const MaskCheck check = generate_checking_masks(m, g.grammar, "{", seed, 1.5f, 5); // 1.5: wander through more states
        CAPTURE(check.text);
        CHECK(check.mismatches == 0);
        CHECK(grammar_match(g.grammar, check.text) != GPT2_MATCH_NONE);
    }
}

TEST_CASE("grammar: the mask allows exactly the tokens that keep the text in the grammar deep in a long bounded repetition (GPT-2 BPE)") {
    // The copies more than 16 from the end share their masks' decided tokens, and tokens longer
    // than 16 bytes are walked from the state (gpt2_grammar::stands_for): in [^\n]{1,60}, and in
    // a JSON string of at most 80 characters as a schema's maxLength writes it, char{0,80} of a
    // rule that reads one character or an escape (temperature 1.5 on the random model wanders
    // into escapes and long tokens, and to the bound).
    struct Repetition {
        const char* gbnf;
        const char* prompt;
        uint64_t seeds[2];
        float temperature;
        int tokens;
    };
    const Repetition repetitions[] = {
        {"root ::= [A-Z] [^\\n]{1,60} [.!?]", "He said:", {3, 4}, 1.0f, 24},
        {"root ::= \"\\\"\" char{0,80} \"\\\"\"\n"
         "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})",
         "\"", {5, 6}, 1.5f, 30},
    };
    const Model& m = bpe_model();
    for (const Repetition& r : repetitions) {
        CAPTURE(r.gbnf);
        Grammar g(m.model, r.gbnf);
        REQUIRE_MESSAGE(g.result == GPT2_OK, g.err.message);
        for (uint64_t seed : r.seeds) {
            const MaskCheck check = generate_checking_masks(m, g.grammar, r.prompt, seed, r.temperature, r.tokens);
            CAPTURE(check.text);
            CHECK(check.mismatches == 0);
            CHECK(check.steps >= 10);
            CHECK(grammar_match(g.grammar, check.text) != GPT2_MATCH_NONE);
        }
    }
}

TEST_CASE("grammar: BPE generation completes a JSON-like sentence and stops at it") {
    const Model& m = bpe_model();
    Grammar g(m.model, "root ::= \"{\\\"ok\\\": \" (\"true\" | \"false\") \"}\"");
    REQUIRE(g.result == GPT2_OK);
    Session s(m);
    gpt2_generate_params p = gpt2_generate_default_params();
    p.grammar = g.grammar;
    p.max_new_tokens = 50;
    const Generated out = generate_with(m.model, s.session, "Answer:", p);
    REQUIRE_MESSAGE(out.result == GPT2_OK, out.err.message);
    CHECK((out.text == "{\"ok\": true}" || out.text == "{\"ok\": false}"));
    CHECK(out.match == GPT2_MATCH_COMPLETE);
    CHECK(out.tokens.size() < 50);
}

TEST_CASE("grammar: each session of a batch follows its own grammar, as it would alone") {
    const Model& m = char_model();
    Grammar yes_no(m.model, "root ::= \"yes\" | \"no\"");
    Grammar name(m.model, "root ::= [A-Z] [a-z]{2,8} \".\"");
    Session a(m), b(m), c(m), a_alone(m), b_alone(m);
    gpt2_generate_params params[3];
    std::string texts[3];
    gpt2_match matches[3];
    for (int i = 0; i < 3; i++) {
        params[i] = gpt2_generate_default_params();
        params[i].seed = 10 + (uint64_t)i;
        params[i].max_new_tokens = 20;
        params[i].on_token = collect_text;
        params[i].user = &texts[i];
        params[i].grammar_match = &matches[i];
    }
    params[0].grammar = yes_no.grammar;
    params[1].grammar = name.grammar; // c has none
    gpt2_session* sessions[3] = {a.session, b.session, c.session};
    const char* prompts[3] = {"ROMEO:", "JULIET:", "ROMEO:"};
    gpt2_error err;
    REQUIRE_MESSAGE(gpt2_generate_batch(sessions, prompts, params, 3, &err) == GPT2_OK, err.message);
    CHECK(grammar_match(yes_no.grammar, texts[0]) == GPT2_MATCH_COMPLETE);
    CHECK(grammar_match(name.grammar, texts[1]) == GPT2_MATCH_COMPLETE);
    CHECK(matches[0] == GPT2_MATCH_COMPLETE);
    CHECK(matches[1] == GPT2_MATCH_COMPLETE);
    for (int i = 0; i < 2; i++) {
        Session& alone = i == 0 ? a_alone : b_alone;
        gpt2_generate_params p = params[i];
        const Generated out = generate_with(m.model, alone.session, prompts[i], p);
        CHECK(out.text == texts[i]);
    }
}

TEST_CASE("grammar: a grammar the vocabulary cannot write is refused when it is made, naming the characters no token holds") {
    const Model& m = char_model(); // shakespeare_char's 65 characters: no braces, quotes or digits but '3'
    struct Case { const char* gbnf; const char* message; };
    for (Case c : {Case{"root ::= \"{\" [a-z]*", "grammar: this model's vocabulary cannot write any text the grammar accepts: no token holds '{'"},
                   Case{"root ::= \"a\" root | \"{\"", "no token holds '{'"}, // "aaa..." never completes
                   Case{"root ::= [0-9]+ \"\xC3\xA9\" | \"[\" [\xE2\x82\xAC] \"]\"", "no token holds U+00E9, '[', U+20AC, ']'"}}) {
        CAPTURE(c.gbnf);
        Grammar g(m.model, c.gbnf);
        CHECK(g.grammar == nullptr);
        CHECK_ERROR(g.err, GPT2_ERROR_BAD_GRAMMAR, c.message);
    }
    // writable: one alternative is enough, and a grammar with no finite sentence is not the vocabulary's doing
    for (const char* gbnf : {"root ::= \"{\" | [a-z]+", "root ::= \"a\" root", "root ::= [0-9{] \"}\"?"}) {
        CAPTURE(gbnf);
        CHECK(Grammar(m.model, gbnf).result == GPT2_OK);
    }
    const char* schema = "{\"type\": \"object\"}";
    gpt2_grammar* json = nullptr;
    gpt2_error e{};
    CHECK(gpt2_grammar_from_json_schema(m.model, schema, std::strlen(schema), nullptr, &json, &e) == GPT2_ERROR_BAD_GRAMMAR);
    CHECK(json == nullptr);
    CHECK_ERROR(e, GPT2_ERROR_BAD_GRAMMAR, "json schema: this model's vocabulary cannot write any text the json schema accepts: no token holds '{'");
    // GPT-2's vocabulary holds every byte
    CHECK(Grammar(bpe_model().model, "root ::= \"{\" [\xE2\x82\xAC]").result == GPT2_OK);
    REQUIRE(gpt2_grammar_from_json_schema(bpe_model().model, schema, std::strlen(schema), nullptr, &json, &e) == GPT2_OK);
    gpt2_grammar_free(json);
}

TEST_CASE("grammar: where no token continues the text, generation fails at that step, the session consistent") {
    const Model& m = char_model();
    Grammar g(m.model, "root ::= \"a\" \"{\" | \"b\""); // writable through "b"; after "a", only '{' (no token holds it)
    REQUIRE(g.result == GPT2_OK);
    int32_t b = -1;
    size_t n = 0;
    REQUIRE(gpt2_tokenize(m.model, "b", 1, 0, &b, 1, &n, nullptr) == GPT2_OK);
    const gpt2_logit_bias ban_b = {b, -INFINITY};
    Session s(m);
    gpt2_generate_params p = gpt2_generate_default_params();
    p.grammar = g.grammar;
    p.logit_bias = &ban_b;
    p.n_logit_bias = 1;
    const Generated out = generate_with(m.model, s.session, "ROMEO:", p);
    CHECK_ERROR(out.err, GPT2_ERROR_BAD_GRAMMAR, "no token of the model's vocabulary continues the text generated so far (1 tokens)");
    CHECK(out.text == "a");
    CHECK(gpt2_session_n_tokens(s.session) == 7); // the prompt and "a"
    p.grammar = nullptr;
    p.max_new_tokens = 5;
    const Generated again = generate_with(m.model, s.session, "", p);
    CHECK(again.result == GPT2_OK);
}

TEST_CASE("grammar: a grammar of another model is refused") {
    const Model& a = char_model();
    Model other(test_model("shakespeare_char.gguf"));
    Grammar g(other.model, "root ::= \"a\"");
    Session s(a);
    gpt2_generate_params p = gpt2_generate_default_params();
    p.grammar = g.grammar;
    const Generated out = generate_with(a.model, s.session, "ROMEO:", p);
    CHECK_ERROR(out.err, GPT2_ERROR_INVALID_ARGUMENT, "grammar was made for another model");
}

namespace {
struct Drawn {
    Generated out;
    int draws = 0; // tokens the sampler drew; the others were forced
};

int collect_drawn_text(void* user, int32_t, const char* text, size_t len) {
    static_cast<Drawn*>(user)->out.text.append(text ? text : "", len);
    return 0;
}

void count_draw(void* user, float*, int) { static_cast<Drawn*>(user)->draws++; }

Drawn generate_counting_draws(const Model& m, gpt2_session* s, const char* prompt, gpt2_generate_params p) {
    Drawn d;
    p.on_token = collect_drawn_text;
    p.on_logits = count_draw;
    p.user = &d;
    p.grammar_match = &d.out.match;
    std::vector<int32_t> prompt_ids(256), ids(4096);
    size_t n_prompt = 0, n = 0;
    REQUIRE(gpt2_tokenize(m.model, prompt, std::strlen(prompt), 0, prompt_ids.data(), prompt_ids.size(), &n_prompt, &d.out.err) == GPT2_OK);
    d.out.result = gpt2_generate(s, prompt_ids.data(), n_prompt, &p, ids.data(), ids.size(), &n, &d.out.err);
    d.out.tokens.assign(ids.begin(), ids.begin() + (long)std::min(n, ids.size()));
    return d;
}

// What a masked greedy choice draws, a token at a time, from the public API alone: the most
// likely token whose text keeps the text in the grammar (the end token: a whole sentence).
std::vector<int32_t> greedy_token_by_token(const Model& m, const gpt2_grammar* g, const char* prompt, int max_new_tokens) {
    Session s(m);
    gpt2_error err;
    std::vector<int32_t> ids(256);
    size_t n = 0;
    REQUIRE(gpt2_tokenize(m.model, prompt, std::strlen(prompt), 0, ids.data(), ids.size(), &n, &err) == GPT2_OK);
    REQUIRE(gpt2_session_eval(s.session, ids.data(), n, &err) == GPT2_OK);
    const gpt2_model_info info = gpt2_model_get_info(m.model);
    std::vector<int32_t> out;
    std::string text;
    while ((int)out.size() < max_new_tokens) {
        const float* logits = gpt2_session_logits(s.session);
        int32_t best = -1;
        std::string best_piece;
        for (int32_t t = 0; t < info.n_vocab; t++) {
            std::string piece;
            if (t == info.eos_token) {
                if (grammar_match(g, text) != GPT2_MATCH_COMPLETE) continue;
            } else {
                piece = token_text(m.model, t);
                if (piece.empty() || grammar_match(g, text + piece) == GPT2_MATCH_NONE) continue;
            }
            if (best < 0 || logits[t] > logits[best]) {
                best = t;
                best_piece = piece;
            }
        }
        REQUIRE(best >= 0);
        out.push_back(best);
        if (best == info.eos_token) break;
        text += best_piece;
        REQUIRE(gpt2_session_eval(s.session, &best, 1, &err) == GPT2_OK);
        if (grammar_match(g, text) == GPT2_MATCH_COMPLETE) { // a sentence nothing extends ends the generation
            bool more = false;
            for (int32_t t = 0; t < info.n_vocab && !more; t++) {
                if (t == info.eos_token) continue;
                const std::string piece = token_text(m.model, t);
                more = !piece.empty() && grammar_match(g, text + piece) != GPT2_MATCH_NONE;
            }
            if (!more) break;
        }
    }
    return out;
}
} // namespace

TEST_CASE("grammar: forced text changes nothing a greedy choice would draw (character vocabulary: the forced tokens are the only ones allowed)") {
    const Model& m = char_model();
    Grammar g(m.model, "root ::= \"ROMEO: \" name \", my lord\" (\".\" | \"!\")\nname ::= [A-Z] [a-z]{2,8}");
    REQUIRE_MESSAGE(g.result == GPT2_OK, g.err.message);
    Session s(m);
    gpt2_generate_params p = gpt2_generate_default_params();
    p.grammar = g.grammar;
    p.temperature = 0;
    p.max_new_tokens = 40;
    const Drawn drawn = generate_counting_draws(m, s.session, "JULIET:\n", p);
    const Generated& out = drawn.out;
    const int draws = drawn.draws;
    REQUIRE_MESSAGE(out.result == GPT2_OK, out.err.message);
    CHECK(out.tokens == greedy_token_by_token(m, g.grammar, "JULIET:\n", 40));
    CHECK(out.match == GPT2_MATCH_COMPLETE);
    CHECK(draws < (int)out.tokens.size() - 10); // "ROMEO: " and ", my lord" were not drawn
}

TEST_CASE("grammar: forced text joins the context in one pass, as the tokenizer writes it, with the logits of one token at a time (GPT-2 BPE)") {
    const Model& m = bpe_model();
    Grammar g(m.model, "root ::= \"{\\\"action\\\": \\\"\" (\"attack\" | \"flee\" | \"wait\") \"\\\", \\\"line\\\": \\\"\" [a-z ]{1,12} \"\\\"}\"");
    REQUIRE_MESSAGE(g.result == GPT2_OK, g.err.message);
    Session s(m);
    gpt2_generate_params p = gpt2_generate_default_params();
    p.grammar = g.grammar;
    p.max_new_tokens = 60;
    const Drawn drawn = generate_counting_draws(m, s.session, "Guard:", p);
    const Generated& out = drawn.out;
    const int draws = drawn.draws;
    REQUIRE_MESSAGE(out.result == GPT2_OK, out.err.message);
    CAPTURE(out.text);
    CHECK(grammar_match(g.grammar, out.text) != GPT2_MATCH_NONE);
    // The start is forced: `{"action": "` as gpt2_tokenize writes it, all but its last token,
    // which the next draw may extend (`"` then `attack`, or `"att`...).
    const std::string start = "{\"action\": \"";
    std::vector<int32_t> start_ids(64);
    size_t n_start = 0;
    gpt2_error err;
    REQUIRE(gpt2_tokenize(m.model, start.data(), start.size(), 0, start_ids.data(), start_ids.size(), &n_start, &err) == GPT2_OK);
    REQUIRE(n_start >= 2);
    REQUIRE(out.tokens.size() > n_start);
    CHECK(std::vector<int32_t>(out.tokens.begin(), out.tokens.begin() + (long)(n_start - 1)) == std::vector<int32_t>(start_ids.begin(), start_ids.begin() + (long)(n_start - 1)));
    CHECK(draws < (int)out.tokens.size());
    // The context after the forced runs: the logits of the same tokens fed one at a time.
    Session one_by_one(m);
    const size_t n_context = gpt2_session_n_tokens(s.session);
    const int32_t* context = gpt2_session_tokens(s.session);
    for (size_t i = 0; i < n_context; i++) REQUIRE(gpt2_session_eval(one_by_one.session, context + i, 1, &err) == GPT2_OK);
    const int V = gpt2_model_get_info(m.model).n_vocab;
    const float *a = gpt2_session_logits(s.session), *b = gpt2_session_logits(one_by_one.session);
    double worst = 0;
    for (int t = 0; t < V; t++) worst = std::max(worst, (double)std::fabs(a[t] - b[t]));
    CHECK(worst < 1e-3);
}
