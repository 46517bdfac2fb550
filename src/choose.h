#ifndef GPT2__PART_CHOOSE_H
#define GPT2__PART_CHOOSE_H
#include "capi.h"

/* gpt2_choose: options scored as continuations of the session's context. The options' tokens
   make a trie; the model runs once per node that has children (the logits after that node's
   path), with the cache rows of the context and of the path above it reused, so options that
   share a prefix share its cost and N options cost one token's run per distinct token, not N
   generations. A node's log-probability is read from its parent's logits, as gpt2_score reads
   each position's; an option's is the sum along its path. */

struct gpt2__choice_node {
    int32_t token = -1;
    int parent = -1, depth = 0; /* depth: the tokens of the path, this node's included */
    double logprob = 0.0;       /* log p(token | context, the path above) */
    gpt2__vector<int> children;
};

/* The trie of the options' token lists; end[i] the node where option i ends. Node 0 is the root
   (the context). */
static void gpt2__choice_trie(const gpt2__vector<gpt2__vector<int32_t>>& options, gpt2__vector<gpt2__choice_node>* nodes, gpt2__vector<int>* end) {
    nodes->assign(1, gpt2__choice_node());
    end->assign(options.size(), 0);
    for (size_t i = 0; i < options.size(); i++) {
        int at = 0;
        for (int32_t id : options[i]) {
            int next = -1;
            for (int c : (*nodes)[(size_t)at].children)
                if ((*nodes)[(size_t)c].token == id) next = c;
            if (next < 0) {
                next = (int)nodes->size();
                gpt2__choice_node n;
                n.token = id;
                n.parent = at;
                n.depth = (*nodes)[(size_t)at].depth + 1;
                nodes->push_back(n);
                (*nodes)[(size_t)at].children.push_back(next);
            }
            at = next;
        }
        (*end)[i] = at;
    }
}

/* The log-probabilities of node's children from the logits after node's path. */
static gpt2_result gpt2__choice_children(gpt2_session* s, gpt2__vector<gpt2__choice_node>* nodes, int node, gpt2_error* err) {
    const float* logits = s->backend->logits(s);
    if (!logits) return gpt2__fail(err, GPT2_ERROR_DEVICE, "the %s backend could not return the logits", s->backend->name);
    for (int c : (*nodes)[(size_t)node].children) (*nodes)[(size_t)c].logprob = gpt2__log_prob(logits, s->model->n_vocab, (*nodes)[(size_t)c].token);
    return GPT2_OK;
}

/* Every node's log-probability (the session's context and logits as the caller left them; the
   caller restores them). The walk is depth first: the context is cut back to the node's parent's
   path, which it holds, and the node's token runs on the cache rows of everything before it. */
static gpt2_result gpt2__choice_score(gpt2_session* s, gpt2__vector<gpt2__choice_node>* nodes, gpt2_error* err) {
    GPT2__TRY(gpt2__choice_children(s, nodes, 0, err));
    const size_t n_context = s->tokens.size();
    gpt2__vector<int> order, stack((*nodes)[0].children.rbegin(), (*nodes)[0].children.rend());
    while (!stack.empty()) { /* depth first, so that the context holds each node's parent's path when it comes */
        const int at = stack.back();
        stack.pop_back();
        const gpt2__choice_node& n = (*nodes)[(size_t)at];
        if (n.children.empty()) continue; /* a leaf: nothing is read after it */
        order.push_back(at);
        stack.insert(stack.end(), n.children.rbegin(), n.children.rend());
    }
    gpt2__vector<int32_t> path;
    for (int i : order) {
        const gpt2__choice_node& n = (*nodes)[(size_t)i];
        path.assign((size_t)n.depth, 0);
        for (int at = i; at > 0; at = (*nodes)[(size_t)at].parent) path[(size_t)(*nodes)[(size_t)at].depth - 1] = (*nodes)[(size_t)at].token;
        size_t shared = 0; /* of path[0..depth-1), the tokens the context already holds after n_context */
        while (shared + 1 < path.size() && n_context + shared < s->tokens.size() && s->tokens[n_context + shared] == path[shared]) shared++;
        s->tokens.resize(n_context + shared);
        s->n_cached = std::min(s->n_cached, (int)s->tokens.size());
        GPT2__TRY(gpt2__session_append(s, path.data() + shared, path.size() - shared, err));
        GPT2__TRY(gpt2__choice_children(s, nodes, i, err));
    }
    return GPT2_OK;
}

/* Where the longest option does not fit after the context, the context is cut as evaluating
   that option would cut it (gpt2__make_room under the session's policy; where that takes every
   token, DISCARD with n_keep 0, the last one stays), and its last token runs again for the
   logits after the cut context. The caller's checkpoint puts the context back. */
static gpt2_result gpt2__choice_make_room(gpt2_session* s, size_t longest, gpt2_error* err) {
    if (s->tokens.size() + longest <= (size_t)s->n_ctx) return GPT2_OK;
    const int32_t last = s->tokens.back();
    gpt2__make_room(s, longest);
    if (s->tokens.empty()) s->tokens.push_back(last);
    const int32_t end = s->tokens.back();
    s->tokens.pop_back();
    s->n_cached = std::min(s->n_cached, (int)s->tokens.size());
    return gpt2__session_append(s, &end, 1, err);
}

GPT2_DEF gpt2_result gpt2_choose(gpt2_session* s, const char* const* options, size_t n_options, float* logprobs, size_t* best, gpt2_error* err) {
    GPT2__TRY(gpt2__check_session(s, "session", err));
    if (!best) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "best is NULL: nowhere to put the chosen option's index");
    if (!options || n_options == 0)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "no options: options is %s and n_options is %zu; expected at least one", options ? "set" : "NULL", n_options);
    for (size_t i = 0; i < n_options; i++)
        if (!options[i] || !*options[i]) return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "options[%zu] is %s; expected a string of at least one byte", i, options[i] ? "empty" : "NULL");
    if (s->model->tokenizer.kind == GPT2_TOKENIZER_NONE)
        return gpt2__fail(err, GPT2_ERROR_NO_VOCABULARY, "options are text and this model has no vocabulary: score token ids with gpt2_score instead");
    GPT2__USE_SESSION(s, false, err);
    if (s->tokens.empty() || !s->has_logits)
        return gpt2__fail(err, GPT2_ERROR_INVALID_ARGUMENT, "the session's context is empty: evaluate a prompt first (the options are scored as its continuation)");
    GPT2__GUARD_BEGIN
    /* The context tokens that stay when room is made: the policy's n_keep, and at least one (the
       options are scored after something). */
    const size_t kept = std::max<size_t>(1, s->context_policy == GPT2_CONTEXT_DISCARD ? (size_t)s->n_keep : 0);
    gpt2__vector<gpt2__vector<int32_t>> ids(n_options);
    size_t longest = 0;
    for (size_t i = 0; i < n_options; i++) {
        const gpt2_result res = gpt2__tokenize(s->model, options[i], std::strlen(options[i]), false, &ids[i], err);
        if (res != GPT2_OK) return gpt2__fail(err, res, "options[%zu]: %s", i, gpt2__string(err ? err->message : "").c_str());
        if (kept + ids[i].size() > (size_t)s->n_ctx)
            return gpt2__fail(err, GPT2_ERROR_CONTEXT_FULL, "options[%zu] is %zu tokens; beside the %zu context token%s the context policy keeps that is %zu, more than n_ctx %d",
                              i, ids[i].size(), kept, kept == 1 ? "" : "s", kept + ids[i].size(), s->n_ctx);
        longest = std::max(longest, ids[i].size());
    }
    gpt2__vector<gpt2__choice_node> nodes;
    gpt2__vector<int> end;
    gpt2__choice_trie(ids, &nodes, &end);
    gpt2__checkpoint before; /* the session as it was: put back however the scoring ends */
    GPT2__TRY(gpt2__checkpoint_take(s, &before, err));
    gpt2_result res = gpt2__choice_make_room(s, longest, err);
    if (res == GPT2_OK) res = gpt2__choice_score(s, &nodes, err);
    gpt2_error restore_err;
    const gpt2_result restored = gpt2__checkpoint_restore(s, &before, &restore_err); /* ABORTED when it worked */
    if (restored != GPT2_ERROR_ABORTED) {
        if (err) *err = restore_err;
        return restored;
    }
    if (res != GPT2_OK) return res == GPT2_ERROR_ABORTED ? gpt2__aborted(err) : res;
    size_t chosen = 0;
    double chosen_sum = 0.0;
    for (size_t i = 0; i < n_options; i++) {
        double sum = 0.0;
        for (int at = end[i]; at > 0; at = nodes[(size_t)at].parent) sum += nodes[(size_t)at].logprob;
        if (logprobs) logprobs[i] = (float)sum;
        if (i == 0 || sum > chosen_sum) { /* a tie keeps the lower index */
            chosen = i;
            chosen_sum = sum;
        }
    }
    *best = chosen;
    return gpt2__ok(err);
    GPT2__GUARD_END(err)
}

#endif /* GPT2__PART_CHOOSE_H */
