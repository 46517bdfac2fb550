#ifndef GPT2__PART_CPU_THREADPOOL_H
#define GPT2__PART_CPU_THREADPOOL_H
#include "../common.h"

/* Worker threads of one session. They are started once, with the session, never per token.
   Between jobs a worker first spins for at most GPT2_SPIN_MICROSECONDS (default 50), because
   the parallel regions of one forward pass follow each other within microseconds and waking a
   sleeping thread costs more than that; then it sleeps on a condition variable, so an idle
   session costs the host application nothing and a game's own threads are never starved for
   longer than that bound. The calling thread does a share of every job. */

#ifndef GPT2_SPIN_MICROSECONDS
#define GPT2_SPIN_MICROSECONDS 50
#endif

#include <chrono>
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <emmintrin.h>
#define GPT2__CPU_RELAX() _mm_pause()
#elif defined(__aarch64__) && defined(__GNUC__)
#define GPT2__CPU_RELAX() __asm__ volatile("yield")
#else
#define GPT2__CPU_RELAX() ((void)0)
#endif

struct gpt2__pool {
    typedef void (*job_fn)(void* context, int thread_index);
    int n_threads = 1;
    std::vector<std::thread> workers;
    std::mutex mutex;
    std::condition_variable wake, done;
    std::atomic<uint64_t> generation{0}; /* bumped for each job */
    std::atomic<int> pending{0};         /* workers still running the current job */
    std::atomic<int> sleepers{0};        /* workers asleep (or falling asleep) on `wake` */
    std::atomic<bool> caller_sleeping{false};
    std::atomic<bool> stopping{false};
    job_fn job = nullptr;                /* published by the release of `generation` */
    void* context = nullptr;
    /* gpt2__parallel_for's chunks still to run in each thread's region: the first in the low 32
       bits, the end in the high 32, one word, so that its owner (from the front) and a thief
       (from the back) each take a chunk by one compare-and-swap; a cache line each */
    struct alignas(64) region {
        std::atomic<uint64_t> chunks{0};
    };
    region* regions = nullptr; /* n_threads of them when there are workers (gpt2__pool_start) */
};

/* Spins until ready() or the spin budget is spent; true when ready. */
template <class Ready>
static bool gpt2__spin_until(const Ready& ready) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 1;; i++) {
        if (ready()) return true;
        GPT2__CPU_RELAX();
        if ((i & 63) == 0 && std::chrono::steady_clock::now() - start > std::chrono::microseconds(GPT2_SPIN_MICROSECONDS)) return false;
    }
}

/* Sleeping and waking pair up through sequentially consistent operations on both sides (the
   sleeper announces itself, then re-checks; the waker publishes, then checks for sleepers), so
   a wake-up is never lost and the common, spinning case takes no lock. */
static void gpt2__pool_worker(gpt2__pool* pool, int index) {
    uint64_t seen = 0;
    for (;;) {
        if (!gpt2__spin_until([&] { return pool->generation.load(std::memory_order_acquire) != seen; })) {
            std::unique_lock<std::mutex> lock(pool->mutex);
            pool->sleepers.fetch_add(1);
            pool->wake.wait(lock, [&] { return pool->generation.load() != seen; });
            pool->sleepers.fetch_sub(1);
        }
        seen = pool->generation.load(std::memory_order_acquire);
        if (pool->stopping.load()) return;
        pool->job(pool->context, index);
        if (pool->pending.fetch_sub(1) == 1 && pool->caller_sleeping.load()) {
            std::lock_guard<std::mutex> lock(pool->mutex);
            pool->done.notify_one();
        }
    }
}

/* WebAssembly built by Emscripten without -pthread has no threads: a std::thread would abort,
   and threads there need a SharedArrayBuffer, which browsers give only to pages served with
   cross-origin isolation headers (COOP/COEP) that a plain static server does not send. There
   every session runs on the calling thread alone, whatever n_threads asks for (results do not
   depend on the thread count). */
#if defined(__EMSCRIPTEN__) && !defined(__EMSCRIPTEN_PTHREADS__)
#define GPT2__SINGLE_THREADED 1
#endif

/* Returns false when threads could not be started (the pool then runs everything inline). */
static bool gpt2__pool_start(gpt2__pool* pool, int n_threads) {
    pool->n_threads = 1;
#if defined(GPT2__SINGLE_THREADED)
    n_threads = 1;
#endif
    if (n_threads > 1 && !(pool->regions = new (std::nothrow) gpt2__pool::region[(size_t)n_threads])) return false;
#if defined(__cpp_exceptions)
    try {
#endif
        for (int i = 1; i < n_threads; i++) {
            pool->workers.emplace_back(gpt2__pool_worker, pool, i);
            pool->n_threads = i + 1;
        }
#if defined(__cpp_exceptions)
    } catch (...) {
        return false;
    }
#endif
    return true;
}

static void gpt2__pool_wake(gpt2__pool* pool) {
    if (pool->sleepers.load() > 0) {
        std::lock_guard<std::mutex> lock(pool->mutex);
        pool->wake.notify_all();
    }
}

static void gpt2__pool_stop(gpt2__pool* pool) {
    pool->stopping.store(true);
    pool->generation.fetch_add(1);
    {
        std::lock_guard<std::mutex> lock(pool->mutex);
        pool->wake.notify_all();
    }
    for (std::thread& t : pool->workers) t.join();
    pool->workers.clear();
    delete[] pool->regions;
    pool->regions = nullptr;
}

/* Hands job(context, i) to every worker i (1 ..); the caller does its own share, then waits. */
static void gpt2__pool_begin(gpt2__pool* pool, gpt2__pool::job_fn job, void* context) {
    pool->job = job;
    pool->context = context;
    pool->pending.store(pool->n_threads - 1, std::memory_order_relaxed);
    pool->generation.fetch_add(1);
    gpt2__pool_wake(pool);
}

/* Returns when every worker has finished the job of gpt2__pool_begin. */
static void gpt2__pool_wait(gpt2__pool* pool) {
    if (gpt2__spin_until([&] { return pool->pending.load(std::memory_order_acquire) == 0; })) return;
    std::unique_lock<std::mutex> lock(pool->mutex);
    /* an exchange, not a store: as a read-modify-write it is ordered before the load of
       `pending` on every target, emulators included (qemu-user runs an AArch64 store-release
       and a later load-acquire as plain x86 moves, which the store buffer reorders: the last
       worker then misses the flag, and both sides sleep for ever) */
    pool->caller_sleeping.exchange(true);
    pool->done.wait(lock, [&] { return pool->pending.load() == 0; });
    pool->caller_sleeping.store(false);
}

/* Splits [0, n) into chunks that start at multiples of `align` and calls body(begin, end,
   thread_index) on each, the calling thread being thread 0. Each thread owns a contiguous region
   of about 8 chunks and runs them in order, so its share of a matrix is one stream through
   memory that the prefetchers (the hardware's, and the kernels' own, which run on past a chunk's
   end) follow from chunk to chunk; a thread out of chunks takes the last chunk left in another's
   region, so a thread the OS preempts (a busy machine, a game's own threads) delays only its
   current chunk instead of a whole 1/n share. Chunks handed out from one shared counter, a
   thread's next chunk n chunks on from its last, decoded slower (docs/PERFORMANCE.md, Kernel
   notes). The caller runs its chunks here, so a body is one call below the parallel region. */
template <class Body>
static void gpt2__parallel_for(gpt2__pool* pool, int64_t n, int64_t align, const Body& body) {
    struct Job {
        const Body* body;
        gpt2__pool* pool;
        int64_t n, chunk;
        /* the next chunk of thread `index`: the first left in its region, else the last left in another's */
        bool take(int index, int64_t* begin, int64_t* end) {
            const int threads = pool->n_threads;
            for (int i = 0; i < threads; i++) {
                const bool own = i == 0;
                std::atomic<uint64_t>& chunks = pool->regions[(index + i) % threads].chunks;
                uint64_t left = chunks.load(std::memory_order_relaxed);
                for (;;) {
                    const uint64_t first = left & 0xffffffffu, last = left >> 32;
                    if (first >= last) break;
                    const uint64_t c = own ? first : last - 1, rest = own ? (last << 32 | (first + 1)) : ((last - 1) << 32 | first);
                    if (chunks.compare_exchange_weak(left, rest, std::memory_order_relaxed)) {
                        *begin = (int64_t)c * chunk;
                        *end = std::min(n, *begin + chunk);
                        return true;
                    }
                }
            }
            return false;
        }
        static void run(void* context, int index) {
            Job* job = (Job*)context;
            for (int64_t begin, end; job->take(index, &begin, &end);) (*job->body)(begin, end, index);
        }
    };
    const int threads = pool->n_threads;
    const int64_t units = (n + align - 1) / align;
    const int64_t chunk = align * std::max<int64_t>(1, units / ((int64_t)threads * 8));
    if (threads == 1) {
        for (int64_t begin = 0; begin < n; begin += chunk) body(begin, std::min(n, begin + chunk), 0);
        return;
    }
    const int64_t n_chunks = (n + chunk - 1) / chunk; /* about 8 per thread, or n / align: far below 2^32 */
    for (int i = 0; i < threads; i++)
        pool->regions[i].chunks.store((uint64_t)(n_chunks * (i + 1) / threads) << 32 | (uint64_t)(n_chunks * i / threads), std::memory_order_relaxed);
    Job job{&body, pool, n, chunk};
    gpt2__pool_begin(pool, Job::run, &job); /* its generation's increment publishes the regions */
    for (int64_t begin, end; job.take(0, &begin, &end);) body(begin, end, 0);
    gpt2__pool_wait(pool);
}

#endif /* GPT2__PART_CPU_THREADPOOL_H */
