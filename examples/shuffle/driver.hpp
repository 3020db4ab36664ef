// Runs a shuffle job (map stage, then reduce stage) over one backend, checks its result, and
// crashes and restarts it. The same records reach every backend: they are generated from the
// workload's seed (workload.hpp).
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <tlptm/tlptm.hpp>

#include "file_store.hpp"
#include "memory_store.hpp"
#include "nv_store.hpp"
#include "workload.hpp"

namespace shuffle {

/// in_memory: the no-shuffle baseline (memory_store.hpp), the same job with a hand-off between
/// the stages that costs nothing.
enum class backend_kind { tlptm_private, tlptm_shared, file_hash, file_sort, in_memory };

inline const char* to_string(backend_kind b) {
    switch (b) {
    case backend_kind::tlptm_private:
        return "tlptm-private";
    case backend_kind::tlptm_shared:
        return "tlptm-shared";
    case backend_kind::file_hash:
        return "file-hash";
    case backend_kind::file_sort:
        return "file-sort";
    case backend_kind::in_memory:
        return "in-memory";
    }
    return "?";
}

inline bool is_tlptm(backend_kind b) {
    return b == backend_kind::tlptm_private || b == backend_kind::tlptm_shared;
}

struct job_options {
    workload w;
    backend_kind backend = backend_kind::tlptm_private;
    std::size_t chunk_size = 8192;
    bool lazy = true;
    unsigned threads = 2;
    std::uint32_t write_ns = 0;   ///< emulated persistent-memory write latency per line
    std::string dir = "/dev/shm"; ///< where pools and shuffle directories go
    std::string tag = "run";      ///< distinguishes the files of concurrent runs
    bool progress = false;
    /// Map the pool's pages when it is created (pool_options::prefault, as PMDK's prefault
    /// option does), so that the map stage does not take a page fault per 4 KiB of chunks. An
    /// application's choice: the pool stands for persistent memory set aside for the shuffle
    /// service before the job (its CPU time is reported as the setup, not in the stages).
    bool prefault = false;
    /// Populate each new chunk's pages with one madvise in the map stage (private buffers,
    /// one transaction per map task), instead of a page fault per 4 KiB.
    bool populate = true;
    bool task_transaction = true; ///< false: one transaction per chunk, staged records
    bool read_in_place = true;    ///< false: reducers copy the records out of the pool first

    std::string pool_path() const {
        return dir + "/tlptm-shuffle-" + std::to_string(::getpid()) + "-" + tag + ".pool";
    }
    std::string file_dir() const {
        return dir + "/tlptm-shuffle-" + std::to_string(::getpid()) + "-" + tag + ".d";
    }

    store_options store() const {
        store_options s;
        s.chunk_size = chunk_size;
        s.layout = backend == backend_kind::tlptm_shared ? buffer_layout::shared_buffers
                                                         : buffer_layout::private_buffers;
        s.lazy = lazy;
        s.task_transaction = task_transaction;
        s.read_in_place = read_in_place;
        s.populate_chunks = populate && !prefault; // prefaulted pages are mapped already
        return s;
    }

    /// A pool big enough for the job: the data, a chunk of slack per buffer (two with eager
    /// allocation), the mapping table and the log rings.
    tlptm::pool_options pool() const {
        tlptm::pool_options o;
        std::uint64_t lists = std::uint64_t{w.maps} * w.partitions;
        std::uint64_t data =
            w.kind == workload_kind::terasort ? w.input_bytes : w.input_bytes / 2 + (16u << 20);
        std::uint64_t slack = lists * chunk_size * (lazy ? 1 : 2);
        o.size = static_cast<std::size_t>(data + data / 8 + slack +
                                          nv_store::table_bytes_for(w.maps, lists) + (96u << 20));
        o.size = (o.size + (1u << 20) - 1) & ~std::size_t{(1u << 20) - 1};
        o.max_threads = std::max(4u, threads + 1);
        o.log_capacity = std::size_t{4} << 20;
        o.durability = tlptm::durability::emulate_pmem;
        o.emulate_write_ns = write_ns;
        o.prefault = prefault;
        return o;
    }
};

/// What one run of a job measured and found.
struct job_result {
    std::string backend;
    std::size_t chunk_size = 0;
    bool lazy = true;
    std::uint32_t write_ns = 0;
    std::uint32_t maps_run = 0;
    double map_s = 0, reduce_s = 0; ///< wall-clock time of the stages
    /// CPU time of the stages' threads, and of the reducers' reading of their data (the
    /// shuffle read; sorting / aggregating is the rest of reduce_cpu_s).
    double map_cpu_s = 0, reduce_cpu_s = 0, fetch_cpu_s = 0;
    /// Creating the pool or the directory before the map stage (CPU time, wall time): with
    /// prefault, the whole pool's pages are mapped here.
    double setup_cpu_s = 0, setup_s = 0;
    std::uint64_t shuffle_bytes = 0, shuffle_records = 0;
    std::uint64_t space_bytes = 0;      ///< pool: bytes of blocks; files: allocated file blocks
    std::uint64_t table_bytes = 0;      ///< pool: the mapping table's block (in space_bytes)
    std::uint64_t superblock_bytes = 0; ///< pool: bytes of the superblocks that hold them
    std::uint64_t allocations = 0;      ///< chunks allocated / files created
    std::uint64_t empty_chunks = 0;     ///< chunks holding no data at the end
    std::uint64_t transactions = 0, aborts = 0, log_bytes = 0, flushed_lines = 0, fences = 0;
    std::uint64_t checksum = 0, outputs = 0;
    std::string error; ///< empty if the reduce results match what the maps emitted

    double mb(double bytes, double s) const { return s > 0 ? bytes / s / 1e6 : 0; }
    double map_mbps() const { return mb(static_cast<double>(shuffle_bytes), map_s); }
    double reduce_mbps() const { return mb(static_cast<double>(shuffle_bytes), reduce_s); }
    double shuffle_mbps() const { return mb(static_cast<double>(shuffle_bytes), map_s + reduce_s); }
    /// Throughput per CPU second: a figure the machine's other load does not change.
    double map_cpu_mbps() const { return mb(static_cast<double>(shuffle_bytes), map_cpu_s); }
    double reduce_cpu_mbps() const { return mb(static_cast<double>(shuffle_bytes), reduce_cpu_s); }
    double shuffle_cpu_mbps() const {
        return mb(static_cast<double>(shuffle_bytes), map_cpu_s + reduce_cpu_s);
    }
    double space_ratio() const {
        return shuffle_bytes ? static_cast<double>(space_bytes) / static_cast<double>(shuffle_bytes)
                             : 0;
    }
};

namespace detail {

inline double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// CPU time of the calling thread (user + system), in seconds.
inline double thread_cpu_s() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// Runs task(i) for every i of `items` on `threads` threads; rethrows the first failure.
/// Returns the CPU time the worker threads used (user + system, page faults and system calls
/// included): on a shared machine it measures the work where wall time measures the load.
inline double parallel_for(const std::vector<std::uint32_t>& items, unsigned threads,
                           const std::function<void(std::uint32_t)>& task,
                           const std::string& label = {}, bool progress = false) {
    std::atomic<std::size_t> next{0}, done{0};
    std::exception_ptr failed;
    std::mutex mu;
    std::atomic<std::uint64_t> cpu_ns{0};
    auto worker = [&] {
        double c0 = thread_cpu_s();
        for (;;) {
            std::size_t i = next.fetch_add(1);
            if (i >= items.size()) {
                cpu_ns += static_cast<std::uint64_t>((thread_cpu_s() - c0) * 1e9);
                return;
            }
            try {
                task(items[i]);
            } catch (...) {
                std::lock_guard lk(mu);
                if (!failed)
                    failed = std::current_exception();
                next.store(items.size());
            }
            done.fetch_add(1);
        }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < std::max(1u, threads); ++t)
        pool.emplace_back(worker);
    if (progress) {
        auto t0 = std::chrono::steady_clock::now();
        auto last = t0;
        while (done.load() < items.size() && next.load() < items.size() + threads) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            if (failed || done.load() >= items.size())
                break;
            if (since(t0) > 2 && since(last) > 2) {
                std::fprintf(stderr, "  [%s] %zu/%zu tasks\n", label.c_str(), done.load(),
                             items.size());
                last = std::chrono::steady_clock::now();
            }
        }
    }
    for (auto& t : pool)
        t.join();
    if (failed)
        std::rethrow_exception(failed);
    return static_cast<double>(cpu_ns.load()) * 1e-9;
}

inline std::vector<std::uint32_t> all_of(std::uint32_t n) {
    std::vector<std::uint32_t> v(n);
    for (std::uint32_t i = 0; i < n; ++i)
        v[i] = i;
    return v;
}

/// The reduce stage over any store with read_partition(p, out), and the check of its result
/// against the map tasks' summaries.
template <class Store>
void reduce_stage(const job_options& o, const Store& store, const std::vector<map_summary>& maps,
                  job_result& r) {
    const workload& w = o.w;
    std::vector<reduce_result> results(w.partitions);
    std::vector<double> fetch(w.partitions);
    auto t0 = std::chrono::steady_clock::now();
    r.reduce_cpu_s = parallel_for(
        all_of(w.partitions), o.threads,
        [&](std::uint32_t p) {
            double f0 = thread_cpu_s();
            partition_data data;
            store.read_partition(p, data);
            fetch[p] = thread_cpu_s() - f0;
            results[p] = reduce_partition(w, p, data);
        },
        r.backend + " reduce", o.progress);
    r.reduce_s = since(t0);
    for (double f : fetch)
        r.fetch_cpu_s += f;
    map_summary want;
    for (const map_summary& s : maps) {
        want.records += s.records;
        want.bytes += s.bytes;
        want.units += s.units;
        want.content += s.content;
    }
    reduce_result got;
    for (const reduce_result& x : results) {
        got.records += x.records;
        got.bytes += x.bytes;
        got.units += x.units;
        got.content += x.content;
        r.outputs += x.outputs;
        if (r.error.empty() && !x.error.empty())
            r.error = x.error;
    }
    if (r.error.empty() && (got.records != want.records || got.bytes != want.bytes ||
                            got.units != want.units || got.content != want.content))
        r.error = "the reducers read " + std::to_string(got.records) + " records / " +
                  std::to_string(got.bytes) + " bytes, the maps emitted " +
                  std::to_string(want.records) + " / " + std::to_string(want.bytes) +
                  (got.content != want.content ? " (contents differ)" : "");
    r.shuffle_bytes = want.bytes;
    r.shuffle_records = want.records;
    r.checksum = job_checksum(results);
}

inline map_summary summary_of(const nv_store& s, std::uint32_t m) {
    const map_entry& e = s.entry(m);
    map_summary x;
    x.records = e.records.get();
    x.bytes = e.bytes.get();
    x.units = e.units.get();
    x.content = e.content.get();
    return x;
}

inline std::vector<std::uint32_t> incomplete_of(std::uint32_t maps,
                                                const std::function<bool(std::uint32_t)>& done) {
    std::vector<std::uint32_t> v;
    for (std::uint32_t m = 0; m < maps; ++m)
        if (!done(m))
            v.push_back(m);
    return v;
}

} // namespace detail

/// The map stage and reduce stage of a tlptm backend in an open pool: runs the map tasks that
/// are not complete yet, then reduces. `base` is the heap in use before the shuffle's table
/// was created (for the space figures).
inline job_result run_tlptm(const job_options& o, tlptm::pool& pool, nv_store& store,
                            std::uint64_t heap_before_chunks, std::uint64_t sb_before_chunks) {
    job_result r;
    r.backend = to_string(o.backend);
    r.chunk_size = o.chunk_size;
    r.lazy = o.lazy;
    r.write_ns = o.write_ns;
    tlptm::stats s0 = pool.stats();
    std::vector<std::uint32_t> todo =
        detail::incomplete_of(o.w.maps, [&](std::uint32_t m) { return store.complete(m); });
    r.maps_run = static_cast<std::uint32_t>(todo.size());
    auto t0 = std::chrono::steady_clock::now();
    std::atomic<std::uint64_t> chunks{0};
    r.map_cpu_s = detail::parallel_for(
        todo, o.threads, [&](std::uint32_t m) { chunks += run_map_task(store, m); },
        r.backend + " map", o.progress);
    r.map_s = detail::since(t0);
    tlptm::stats s1 = pool.stats();
    tlptm::stats d = s1 - s0;
    r.transactions = d.tx_committed;
    r.aborts = d.tx_aborted;
    r.log_bytes = d.log_bytes;
    r.flushed_lines = d.flushed_lines;
    r.fences = d.fences;
    r.allocations = chunks.load();
    r.space_bytes = s1.heap.bytes_in_use - heap_before_chunks;
    r.superblock_bytes = s1.heap.bytes_in_superblocks - sb_before_chunks;
    r.empty_chunks = store.empty_chunks();
    std::vector<map_summary> maps(o.w.maps);
    for (std::uint32_t m = 0; m < o.w.maps; ++m)
        maps[m] = detail::summary_of(store, m);
    detail::reduce_stage(o, store, maps, r);
    return r;
}

/// Runs the whole job on a fresh pool or directory of the backend, removes it, and returns
/// what it measured. Never throws for a wrong result: it is reported in job_result::error.
inline job_result run_job(const job_options& o) {
    o.w.validate();
    if (is_tlptm(o.backend)) {
        std::string path = o.pool_path();
        std::filesystem::remove(path);
        job_result r;
        {
            auto t0 = std::chrono::steady_clock::now();
            double c0 = detail::thread_cpu_s();
            tlptm::pool pool = tlptm::pool::create(path, o.pool()); // prefaults if asked
            double setup_cpu = detail::thread_cpu_s() - c0, setup = detail::since(t0);
            pool.root<shuffle_root>();
            tlptm::stats before = pool.stats();
            nv_store store(pool, 0, o.w, o.store());
            std::uint64_t table = pool.stats().heap.bytes_in_use - before.heap.bytes_in_use;
            r = run_tlptm(o, pool, store, before.heap.bytes_in_use,
                          before.heap.bytes_in_superblocks);
            r.table_bytes = table;
            r.setup_cpu_s = setup_cpu;
            r.setup_s = setup;
        }
        std::filesystem::remove(path);
        return r;
    }
    job_result r;
    r.backend = to_string(o.backend);
    r.chunk_size = o.chunk_size;
    r.write_ns = o.write_ns;
    r.maps_run = o.w.maps;
    // The map stage, then the reduce stage, on a store that is not tlptm's (blocks or files
    // taken per map task: allocations).
    auto run = [&](auto& store, double setup_cpu, double setup) {
        r.setup_cpu_s = setup_cpu;
        r.setup_s = setup;
        std::atomic<std::uint64_t> taken{0};
        auto t0 = std::chrono::steady_clock::now();
        r.map_cpu_s = detail::parallel_for(
            detail::all_of(o.w.maps), o.threads,
            [&](std::uint32_t m) { taken += store.run_map_task(m); }, r.backend + " map",
            o.progress);
        r.map_s = detail::since(t0);
        r.allocations = taken.load();
        r.space_bytes = store.space_used();
        std::vector<map_summary> maps(o.w.maps);
        for (std::uint32_t m = 0; m < o.w.maps; ++m)
            maps[m] = store.summary(m);
        detail::reduce_stage(o, store, maps, r);
    };
    if (o.backend == backend_kind::in_memory) {
        auto t0 = std::chrono::steady_clock::now();
        double c0 = detail::thread_cpu_s();
        memory_store store(o.w, o.chunk_size, o.prefault, o.populate);
        r.chunk_size = store.block_bytes();
        run(store, detail::thread_cpu_s() - c0, detail::since(t0));
        return r;
    }
    std::string dir = o.file_dir();
    std::filesystem::remove_all(dir);
    auto t0 = std::chrono::steady_clock::now();
    double c0 = detail::thread_cpu_s();
    if (o.backend == backend_kind::file_hash) {
        hash_file_store store(dir, o.w);
        run(store, detail::thread_cpu_s() - c0, detail::since(t0));
    } else {
        sort_file_store store(dir, o.w);
        run(store, detail::thread_cpu_s() - c0, detail::since(t0));
    }
    std::filesystem::remove_all(dir);
    return r;
}

// ---- crash and restart ---------------------------------------------------------------------

/// What a crash-free run leaves, for the crash trials to compare with.
struct crash_reference {
    std::uint64_t checksum = 0;
    double map_s = 0;
    std::uint64_t heap_with_table = 0; ///< heap in use once the table exists, before any chunk
    std::uint64_t heap_final = 0;      ///< heap in use after the map stage
};

/// One kill of the map stage and its restart.
struct crash_trial {
    bool killed = false; ///< false: the map stage finished before the kill
    double kill_after_s = 0;
    std::uint32_t complete_before = 0; ///< map tasks complete at the crash
    std::uint32_t rerun = 0;           ///< map tasks the restart ran
    discard_report discarded;
    double open_s = 0;    ///< opening the pool (recovery)
    double restart_s = 0; ///< open + discard: until the shuffle can resume
    double rerun_s = 0;   ///< the incomplete map tasks
    std::uint64_t heap_at_open = 0, heap_after_discard = 0, heap_expected_after_discard = 0,
                  heap_final = 0;
    std::uint64_t checksum = 0;
    std::string error; ///< empty if every check passed
};

/// Runs the job crash-free on the private layout and records what the trials compare with.
inline crash_reference reference_run(const job_options& o) {
    crash_reference ref;
    std::string path = o.pool_path();
    std::filesystem::remove(path);
    {
        tlptm::pool pool = tlptm::pool::create(path, o.pool());
        pool.root<shuffle_root>();
        tlptm::stats before = pool.stats();
        nv_store store(pool, 0, o.w, o.store());
        ref.heap_with_table = pool.stats().heap.bytes_in_use;
        job_result r =
            run_tlptm(o, pool, store, before.heap.bytes_in_use, before.heap.bytes_in_superblocks);
        if (!r.error.empty())
            throw std::runtime_error("reference run: " + r.error);
        ref.checksum = r.checksum;
        ref.map_s = r.map_s;
        ref.heap_final = pool.stats().heap.bytes_in_use;
    }
    std::filesystem::remove(path);
    return ref;
}

/// Kills a child process running the map stage (private buffers) after `kill_after_s`
/// seconds with SIGKILL, then restarts in this process: opens the pool (recovery), discards
/// the incomplete map tasks, reruns them, reduces, and checks the checksum and the heap
/// against the reference. Call it with no pool open and no other thread running (it forks).
inline crash_trial crash_and_restart(const job_options& o, const crash_reference& ref,
                                     double kill_after_s) {
    crash_trial t;
    t.kill_after_s = kill_after_s;
    std::string path = o.pool_path();
    std::filesystem::remove(path);
    {
        tlptm::pool pool = tlptm::pool::create(path, o.pool());
        pool.root<shuffle_root>();
    }
    std::fflush(nullptr);
    int ready[2];
    if (::pipe(ready) != 0)
        throw std::runtime_error("pipe failed");
    pid_t child = ::fork();
    if (child < 0)
        throw std::runtime_error("fork failed");
    if (child == 0) {
        ::close(ready[0]);
        int code = 0;
        try {
            tlptm::pool pool = tlptm::pool::open(path, o.pool());
            nv_store store(pool, 0, o.w, o.store());
            std::vector<std::uint32_t> todo = detail::all_of(o.w.maps);
            char go = 1; // the map stage starts now: the kill time counts from here
            if (::write(ready[1], &go, 1) != 1)
                code = 4;
            detail::parallel_for(todo, o.threads, [&](std::uint32_t m) { run_map_task(store, m); });
        } catch (...) {
            code = 3;
        }
        ::_exit(code);
    }
    ::close(ready[1]);
    char go = 0;
    ssize_t got;
    do
        got = ::read(ready[0], &go, 1); // 0: the child died before its map stage
    while (got < 0 && errno == EINTR);
    ::close(ready[0]);
    std::this_thread::sleep_for(std::chrono::duration<double>(kill_after_s));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    t.killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (!t.killed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        t.error = "the map stage failed in the child process";
        std::filesystem::remove(path);
        return t;
    }
    try {
        auto t0 = std::chrono::steady_clock::now();
        tlptm::pool pool = tlptm::pool::open(path, o.pool());
        t.open_s = detail::since(t0);
        auto store = std::make_unique<nv_store>(pool, 0, o.w, o.store());
        t.heap_at_open = pool.stats().heap.bytes_in_use;
        t.discarded = store->discard_incomplete();
        t.restart_s = detail::since(t0);
        t.complete_before = t.discarded.complete;
        // Freed chunks are pending until the checkpoint allows their reuse (I3) and count as
        // in use until then; the heap rebuilt by a reopening counts only allocated blocks.
        pool.close();
        pool = tlptm::pool::open(path, o.pool());
        t.heap_after_discard = pool.stats().heap.bytes_in_use;
        t.heap_expected_after_discard = ref.heap_with_table;
        store = std::make_unique<nv_store>(pool, 0, o.w, o.store());
        for (std::uint32_t m = 0; m < o.w.maps; ++m)
            if (store->complete(m))
                t.heap_expected_after_discard += store->entry(m).chunks.get() * o.chunk_size;
        job_result r = run_tlptm(o, pool, *store, 0, 0);
        t.rerun = r.maps_run;
        t.rerun_s = r.map_s;
        store.reset();
        pool.close();
        pool = tlptm::pool::open(path, o.pool());
        t.heap_final = pool.stats().heap.bytes_in_use;
        t.checksum = r.checksum;
        if (!r.error.empty())
            t.error = r.error;
        else if (t.rerun != t.discarded.incomplete)
            t.error = "reran " + std::to_string(t.rerun) + " map tasks, " +
                      std::to_string(t.discarded.incomplete) + " were incomplete";
        else if (t.heap_after_discard != t.heap_expected_after_discard)
            t.error = "heap after discarding: " + std::to_string(t.heap_after_discard) +
                      " bytes in use, the table and the complete tasks' chunks are " +
                      std::to_string(t.heap_expected_after_discard);
        else if (t.heap_final != ref.heap_final)
            t.error = "heap after the restart: " + std::to_string(t.heap_final) +
                      " bytes in use, a crash-free run ends with " + std::to_string(ref.heap_final);
        else if (t.checksum != ref.checksum)
            t.error = "checksum differs from the crash-free run";
    } catch (const std::exception& e) {
        t.error = std::string("restart failed: ") + e.what();
    }
    std::filesystem::remove(path);
    return t;
}

} // namespace shuffle
