#ifndef GPT2__PART_MODEL_TOKEN_TRIE_H
#define GPT2__PART_MODEL_TOKEN_TRIE_H
#include "tokenizer.h"

/* The vocabulary as a trie of its tokens' bytes, for the grammar's token masks: a walk visits
   each prefix shared by several tokens once, and leaves a whole subtree the moment its prefix
   cannot continue the text. The nodes are stored in depth-first order, so a walk is a loop over
   an array: node i's subtree is [i, skip[i]); its parent is the last node before it one level up.
   Built once per model, on first use (gpt2_grammar_from_gbnf), and shared by every grammar. */
struct gpt2__token_trie {
    gpt2__vector<uint8_t> byte;    /* the byte that leads from the parent to node i */
    gpt2__vector<uint16_t> depth;  /* 1 for the first byte of a token */
    gpt2__vector<uint32_t> skip;   /* the first node after node i's subtree */
    gpt2__vector<uint32_t> tokens_begin; /* the tokens whose bytes end at node i: */
    gpt2__vector<int32_t> tokens;        /* tokens[tokens_begin[i], tokens_begin[i + 1]) */
    /* 1 when every byte below node i (its subtree but itself) is printable ASCII but '"' and '\\':
       text a JSON string holds as it is, so a walk in a string's body can take the whole subtree
       at once (gpt2__context_tokens_make) */
    gpt2__vector<uint8_t> plain_below;
    uint16_t max_depth = 0;
};

static bool gpt2__plain_byte(uint8_t b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }

/* Every token with bytes, but `excluded` (the end-of-text token, which the grammar treats on
   its own; -1 = none). Tokens with no bytes are left out: they would change nothing. */
static void gpt2__token_trie_build(gpt2__token_trie* trie, const gpt2__tokenizer* tok, int32_t excluded) {
    const size_t V = gpt2__tokenizer_size(tok);
    gpt2__vector<int32_t> order;
    for (size_t id = 0; id < V; id++)
        if ((int32_t)id != excluded && !gpt2__tokenizer_token_bytes(tok, (int32_t)id).empty()) order.push_back((int32_t)id);
    std::sort(order.begin(), order.end(), [tok](int32_t a, int32_t b) {
        return gpt2__tokenizer_token_bytes(tok, a) < gpt2__tokenizer_token_bytes(tok, b);
    });
    *trie = gpt2__token_trie();
    gpt2__vector<uint32_t> open; /* the nodes on the path to the last one added, one per depth */
    std::string_view previous;
    for (int32_t id : order) {
        const std::string_view bytes = gpt2__tokenizer_token_bytes(tok, id);
        size_t shared = 0;
        while (shared < bytes.size() && shared < previous.size() && bytes[shared] == previous[shared]) shared++;
        if (shared == bytes.size() && shared == previous.size()) { /* the same bytes as the last token */
            trie->tokens.push_back(id);
            continue;
        }
        for (size_t d = open.size(); d > shared; d--) trie->skip[open[d - 1]] = (uint32_t)trie->byte.size();
        open.resize(shared);
        for (size_t d = shared; d < bytes.size(); d++) {
            open.push_back((uint32_t)trie->byte.size());
            trie->byte.push_back((uint8_t)bytes[d]);
            trie->depth.push_back((uint16_t)std::min<size_t>(d + 1, UINT16_MAX));
            trie->skip.push_back(0);
            trie->tokens_begin.push_back((uint32_t)trie->tokens.size());
        }
        trie->tokens.push_back(id);
        trie->max_depth = std::max(trie->max_depth, trie->depth.back());
        previous = bytes;
    }
    for (uint32_t node : open) trie->skip[node] = (uint32_t)trie->byte.size();
    trie->tokens_begin.push_back((uint32_t)trie->tokens.size());
    /* the bytes that are not plain before each node, counted: a subtree's count is a difference */
    gpt2__vector<uint32_t> not_plain_before(trie->byte.size() + 1, 0);
    for (size_t i = 0; i < trie->byte.size(); i++) not_plain_before[i + 1] = not_plain_before[i] + !gpt2__plain_byte(trie->byte[i]);
    trie->plain_below.resize(trie->byte.size());
    for (size_t i = 0; i < trie->byte.size(); i++) trie->plain_below[i] = not_plain_before[trie->skip[i]] == not_plain_before[i + 1];
}

#endif /* GPT2__PART_MODEL_TOKEN_TRIE_H */
