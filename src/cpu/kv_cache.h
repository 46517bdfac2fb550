#ifndef GPT2__PART_CPU_KV_CACHE_H
#define GPT2__PART_CPU_KV_CACHE_H
#include "kernels/contract.h"

/* A CPU session's KV cache, in blocks of gpt2__kv_block_rows positions, taken as the context
   fills (nothing for n_ctx up front) and shared by forks (gpt2_session_copy). A block holds its
   positions' keys and values in every layer, (n_layer, 2, gpt2__kv_block_rows, C) values of the
   cache's type (f32 or f16), after a header that counts the caches holding it.

   The one rule: a block held by more than one cache is never written. A cache shares another's
   full blocks below the rows it has cached (gpt2__kv_share), which no pass writes again unless the
   context is cut back into them (gpt2_session_truncate, GPT2_CONTEXT_DISCARD); a pass makes
   every block it writes its own first (gpt2__kv_prepare: copy on write), so no session ever sees
   another's tokens. The count goes up only from a holder (the source of a fork), so a cache that
   finds itself the only holder stays so, and may write; it goes down from any thread (sessions
   of a model may run and be freed on different threads), atomically, and the holder that takes
   it to zero gives the block back: each block once, in whatever order the sessions go.

   Blocks come from the model's pool (gpt2__kv_pool): where huge pages can be asked for (Linux,
   the default allocator), slabs of about 32 MiB, 2 MiB aligned with transparent huge pages asked
   for, as the contiguous cache before them did (decode reads the cache faster from them:
   docs/PERFORMANCE.md); elsewhere a slab is one block. A block given back is handed out again
   first; a slab whose blocks are all back is freed, but for one kept per size (a context that
   crosses a slab's end back and forth does not allocate each time). */

struct gpt2__kv_slab;

/* A block's header: 64 bytes, so that the values after it stay 64-byte aligned. */
struct alignas(64) gpt2__kv_block_header {
    std::atomic<int> holders{0};
    gpt2__kv_slab* slab = nullptr;
};

struct gpt2__kv_slab {
    uint8_t* memory = nullptr; /* slots_per_slab slots of a block and its header */
    int used = 0;              /* its blocks handed out */
};

/* The blocks of one size (a cache of f32 or of f16 values). */
struct gpt2__kv_size {
    size_t slot_bytes = 0; /* a header and a block */
    int slots_per_slab = 0;
    gpt2__vector<gpt2__kv_slab*> slabs;
    gpt2__vector<uint8_t*> free; /* the slots not handed out: a stack, the last given back handed out first */
};

/* A model's blocks (gpt2_model.kv_pool, made with the model by the CPU backend's model_attach). */
struct gpt2__kv_pool {
    std::mutex mutex;          /* guards `sizes` */
    gpt2__kv_size sizes[2];    /* f32, f16 */
    std::atomic<int64_t> block_bytes{0}; /* of the blocks handed out: the caches' memory, a shared block once */
};

struct gpt2__kv_cache {
    const gpt2_model* model = nullptr;
    size_t row_bytes = 0;          /* one position's keys (or values) in one layer: C values */
    bool f16 = false;
    gpt2__vector<uint8_t*> blocks; /* blocks[b] holds positions [b B, (b + 1) B): its values (the header is before them) */
};

static size_t gpt2__kv_block_bytes(const gpt2__kv_cache* c) { return 2 * (size_t)c->model->n_layer * gpt2__kv_block_rows * c->row_bytes; }

static gpt2__kv_block_header* gpt2__kv_header(uint8_t* block) { return (gpt2__kv_block_header*)(block - sizeof(gpt2__kv_block_header)); }

/* Where the rows of `layer`'s keys (kv 0) or values (kv 1) start in a block. */
static size_t gpt2__kv_part_offset(const gpt2__kv_cache* c, int layer, int kv) { return (size_t)(2 * layer + kv) * gpt2__kv_block_rows * c->row_bytes; }

#if defined(GPT2__HUGE_PAGES)
static const size_t gpt2__kv_slab_align = (size_t)2 << 20, gpt2__kv_slab_target = (size_t)32 << 20; /* huge pages */
#else
static const size_t gpt2__kv_slab_align = 64, gpt2__kv_slab_target = 0; /* a block a slab */
#endif

/* A new slab of `size`'s blocks, its slots free; false when out of memory. The caller holds the
   pool's mutex. */
static bool gpt2__kv_slab_new(gpt2__kv_size* size) {
    const size_t bytes = (size_t)size->slots_per_slab * size->slot_bytes;
    size->slabs.reserve(size->slabs.size() + 1);
    size->free.reserve(size->free.size() + (size_t)size->slots_per_slab); /* so that giving back never allocates */
    void* slab = GPT2_MALLOC(sizeof(gpt2__kv_slab));
    uint8_t* memory = (uint8_t*)gpt2__malloc_aligned(bytes, gpt2__kv_slab_align);
    if (!slab || !memory) {
        GPT2_FREE(slab);
        gpt2__free_aligned(memory);
        return false;
    }
    gpt2__advise_huge_pages(memory, bytes);
    gpt2__kv_slab* s = new (slab) gpt2__kv_slab();
    s->memory = memory;
    size->slabs.push_back(s);
    for (int i = size->slots_per_slab - 1; i >= 0; i--) { /* handed out from the slab's start */
        uint8_t* slot = memory + (size_t)i * size->slot_bytes;
        (new (slot) gpt2__kv_block_header())->slab = s;
        size->free.push_back(slot);
    }
    return true;
}

/* Frees slab `s`, none of its blocks handed out; the caller holds the pool's mutex. */
static void gpt2__kv_slab_free(gpt2__kv_size* size, gpt2__kv_slab* s) {
    const uint8_t *begin = s->memory, *end = s->memory + (size_t)size->slots_per_slab * size->slot_bytes;
    size->free.erase(std::remove_if(size->free.begin(), size->free.end(), [&](const uint8_t* slot) { return slot >= begin && slot < end; }), size->free.end());
    size->slabs.erase(std::find(size->slabs.begin(), size->slabs.end(), s));
    gpt2__free_aligned(s->memory);
    s->~gpt2__kv_slab();
    GPT2_FREE(s);
}

/* The pool of model m, its sizes set from m's shape; NULL when out of memory. */
static gpt2__kv_pool* gpt2__kv_pool_new(const gpt2_model* m) {
    void* memory = GPT2_MALLOC(sizeof(gpt2__kv_pool));
    if (!memory) return nullptr;
    gpt2__kv_pool* pool = new (memory) gpt2__kv_pool();
    for (int f16 = 0; f16 < 2; f16++) {
        gpt2__kv_size& size = pool->sizes[f16];
        size.slot_bytes = sizeof(gpt2__kv_block_header) + 2 * (size_t)m->n_layer * gpt2__kv_block_rows * (size_t)m->n_embd * (f16 ? 2 : 4);
        /* about gpt2__kv_slab_target bytes (one block, where a block is more), in whole huge pages */
        const size_t slots = std::max<size_t>(1, gpt2__kv_slab_target / size.slot_bytes);
        const size_t slab = (slots * size.slot_bytes + gpt2__kv_slab_align - 1) / gpt2__kv_slab_align * gpt2__kv_slab_align;
        size.slots_per_slab = (int)(slab / size.slot_bytes);
    }
    return pool;
}

/* Frees the pool of a model whose sessions are all gone. */
static void gpt2__kv_pool_free(gpt2__kv_pool* pool) {
    if (!pool) return;
    for (gpt2__kv_size& size : pool->sizes)
        while (!size.slabs.empty()) gpt2__kv_slab_free(&size, size.slabs.back());
    pool->~gpt2__kv_pool();
    GPT2_FREE(pool);
}

/* The bytes of model m's blocks held by its sessions, a shared block once (tests, gpt2-bench). */
[[maybe_unused]] static int64_t gpt2__kv_bytes(const gpt2_model* m) { return m->kv_pool ? m->kv_pool->block_bytes.load() : 0; }

/* A new block, held by one cache; NULL when out of memory. */
static uint8_t* gpt2__kv_block_new(const gpt2__kv_cache* c) {
    gpt2__kv_pool* pool = c->model->kv_pool;
    gpt2__kv_size& size = pool->sizes[c->f16];
    uint8_t* slot;
    {
        std::lock_guard<std::mutex> lock(pool->mutex);
        if (size.free.empty() && !gpt2__kv_slab_new(&size)) return nullptr;
        slot = size.free.back();
        size.free.pop_back();
        ((gpt2__kv_block_header*)slot)->slab->used++;
    }
    ((gpt2__kv_block_header*)slot)->holders.store(1, std::memory_order_relaxed);
    pool->block_bytes.fetch_add((int64_t)gpt2__kv_block_bytes(c), std::memory_order_relaxed);
    return slot + sizeof(gpt2__kv_block_header);
}

/* Lets go of a block; the last holder gives it back. acq_rel: every holder's reads of the block
   come before it is handed out again. */
static void gpt2__kv_block_release(const gpt2__kv_cache* c, uint8_t* block) {
    gpt2__kv_block_header* h = gpt2__kv_header(block);
    if (h->holders.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    gpt2__kv_pool* pool = c->model->kv_pool;
    gpt2__kv_size& size = pool->sizes[c->f16];
    pool->block_bytes.fetch_sub((int64_t)gpt2__kv_block_bytes(c), std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(pool->mutex);
    size.free.push_back((uint8_t*)h); /* within the capacity reserved with its slab */
    if (--h->slab->used > 0) return;
    for (gpt2__kv_slab* other : size.slabs)
        if (other != h->slab && other->used == 0) { /* one empty slab is kept: free this one */
            gpt2__kv_slab_free(&size, h->slab);
            return;
        }
}

/* gpt2__kv_block_new found no free block and could not allocate a slab. */
static gpt2_result gpt2__kv_out_of_memory(const gpt2__kv_cache* c, gpt2_error* err) {
    const gpt2__kv_size& size = c->model->kv_pool->sizes[c->f16];
    return gpt2__fail(err, GPT2_ERROR_OUT_OF_MEMORY, "cannot allocate %zu bytes for %d blocks of the KV cache", (size_t)size.slots_per_slab * size.slot_bytes,
                      size.slots_per_slab);
}

/* Copies rows [0, n) of every layer's keys and values from block `from` into block `to`. */
static void gpt2__kv_copy_block_rows(const gpt2__kv_cache* c, uint8_t* to, const uint8_t* from, int n) {
    if (n <= 0) return;
    for (int l = 0; l < c->model->n_layer; l++)
        for (int kv = 0; kv < 2; kv++) std::memcpy(to + gpt2__kv_part_offset(c, l, kv), from + gpt2__kv_part_offset(c, l, kv), (size_t)n * c->row_bytes);
}

/* Keeps the first n_blocks blocks and lets go of the others. */
static void gpt2__kv_keep_blocks(gpt2__kv_cache* c, size_t n_blocks) {
    for (size_t b = n_blocks; b < c->blocks.size(); b++) gpt2__kv_block_release(c, c->blocks[b]);
    if (n_blocks < c->blocks.size()) c->blocks.resize(n_blocks);
}

static void gpt2__kv_free(gpt2__kv_cache* c) { gpt2__kv_keep_blocks(c, 0); }

static size_t gpt2__kv_blocks_for(int n_rows) { return ((size_t)n_rows + gpt2__kv_block_rows - 1) / gpt2__kv_block_rows; }

/* Readies the cache for a pass that writes rows [first, end) (the rows before first hold the
   context): blocks up to `end`, each that holds rows of [first, end) its own (a shared one
   replaced by a copy of its rows before first), and none past `end` (the rows there are no
   longer in the context). Running it again changes nothing (a pass resumed after a pause calls
   it again). Out of memory, every block held is still valid and the context unchanged. */
static gpt2_result gpt2__kv_prepare(gpt2__kv_cache* c, int first, int end, gpt2_error* err) {
    const size_t n_blocks = gpt2__kv_blocks_for(end);
    gpt2__kv_keep_blocks(c, n_blocks);
    c->blocks.reserve(n_blocks);
    while (c->blocks.size() < n_blocks) {
        uint8_t* block = gpt2__kv_block_new(c);
        if (!block) return gpt2__kv_out_of_memory(c, err);
        c->blocks.push_back(block);
    }
    for (size_t b = (size_t)first / gpt2__kv_block_rows; b < n_blocks; b++) {
        uint8_t* held = c->blocks[b];
        if (gpt2__kv_header(held)->holders.load(std::memory_order_acquire) == 1) continue;
        uint8_t* own = gpt2__kv_block_new(c);
        if (!own) return gpt2__kv_out_of_memory(c, err);
        gpt2__kv_copy_block_rows(c, own, held, first - (int)b * gpt2__kv_block_rows);
        gpt2__kv_block_release(c, held);
        c->blocks[b] = own;
    }
    return GPT2_OK;
}

/* Makes `dst` hold rows [0, n) of `src` (a cache of the same model and type, n within the rows
   it has cached) and nothing else: src's full blocks among them shared, the rows of a last
   partial one copied into a block of dst's own (a block not full may be written by src's next
   pass, which may be under way: the stage pauses a pass between frames). Out of memory, dst is
   unchanged. */
static gpt2_result gpt2__kv_share(gpt2__kv_cache* dst, const gpt2__kv_cache* src, int n, gpt2_error* err) {
    const size_t full = (size_t)n / gpt2__kv_block_rows;
    const int partial = n % gpt2__kv_block_rows;
    gpt2__vector<uint8_t*> blocks;
    blocks.reserve(full + 1);
    uint8_t* last = nullptr;
    if (partial) {
        last = gpt2__kv_block_new(dst);
        if (!last) return gpt2__kv_out_of_memory(dst, err);
        gpt2__kv_copy_block_rows(dst, last, src->blocks[full], partial);
    }
    for (size_t b = 0; b < full; b++) {
        gpt2__kv_header(src->blocks[b])->holders.fetch_add(1, std::memory_order_relaxed); /* src holds it meanwhile */
        blocks.push_back(src->blocks[b]);
    }
    if (last) blocks.push_back(last);
    gpt2__kv_keep_blocks(dst, 0);
    dst->blocks.swap(blocks);
    return GPT2_OK;
}

/* The row of position `pos` of `layer`'s keys (kv 0) or values (kv 1); its block is held. */
static uint8_t* gpt2__kv_row(const gpt2__kv_cache* c, int layer, int kv, int pos) {
    return c->blocks[(size_t)pos / gpt2__kv_block_rows] + gpt2__kv_part_offset(c, layer, kv) + (size_t)(pos % gpt2__kv_block_rows) * c->row_bytes;
}

/* The view of `layer`'s keys (kv 0) or values (kv 1) that the attention kernels read. */
template <class KV>
static gpt2__kv_rows<KV> gpt2__kv_view(const gpt2__kv_cache* c, int layer, int kv) {
    return {c->blocks.data(), gpt2__kv_part_offset(c, layer, kv) / sizeof(KV), c->row_bytes / sizeof(KV)};
}

/* Copies rows [0, n) of every layer (held) between the cache and `packed`: the keys (n_layer, n,
   C), then the values likewise, as a session's state stores them. */
static void gpt2__kv_copy_rows(const gpt2__kv_cache* c, int n, uint8_t* packed, bool to_cache) {
    for (int kv = 0; kv < 2; kv++)
        for (int l = 0; l < c->model->n_layer; l++)
            for (int pos = 0; pos < n;) {
                const int rows = std::min(n - pos, gpt2__kv_block_rows - pos % gpt2__kv_block_rows); /* the rest of pos's block */
                uint8_t* row = gpt2__kv_row(c, l, kv, pos);
                const size_t bytes = (size_t)rows * c->row_bytes;
                if (to_cache) std::memcpy(row, packed, bytes);
                else std::memcpy(packed, row, bytes);
                packed += bytes;
                pos += rows;
            }
}

#endif /* GPT2__PART_CPU_KV_CACHE_H */
